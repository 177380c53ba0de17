// The web and Node globals npm packages commonly reach for, installed after the prelude in
// every context: `global`, `crypto.getRandomValues`/`randomUUID`, `structuredClone`, `URL`,
// `URLSearchParams` and a `Buffer` subset. None of them reaches outside the context: URL
// parsing and random bytes are native, pure functions of their input.
(function (urlParse, randomBytes) {
  'use strict';
  const G = globalThis;
  const U8 = Uint8Array;
  const def = (name, value) => {
    if (G[name] === undefined) Object.defineProperty(G, name, { value, writable: true, configurable: true, enumerable: false });
  };
  def('global', G);
  // Defined, not assigned: hardened contexts freeze Error.prototype, and assigning a
  // property a frozen prototype holds throws (the override mistake).
  const named = (e, name) => Object.defineProperty(e, 'name', { value: name, writable: true, configurable: true });

  // ---- crypto ----
  const getRandomValues = (view) => {
    if (!ArrayBuffer.isView(view) || view instanceof DataView || view instanceof Float32Array || view instanceof Float64Array) {
      throw new TypeError('crypto.getRandomValues expects an integer typed array');
    }
    if (view.byteLength > 65536) {
      throw named(new Error(`crypto.getRandomValues: ${view.byteLength} bytes asked, at most 65536`), 'QuotaExceededError');
    }
    new U8(view.buffer, view.byteOffset, view.byteLength).set(randomBytes(view.byteLength));
    return view;
  };
  const hex = (b) => Array.prototype.map.call(b, (x) => x.toString(16).padStart(2, '0')).join('');
  const randomUUID = () => {
    const b = getRandomValues(new U8(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = hex(b);
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  };
  def('crypto', Object.freeze({ getRandomValues, randomUUID }));

  // ---- structuredClone (the structured clone algorithm's common types) ----
  const cloneError = (what) => {
    return named(new Error(`${what} could not be cloned`), 'DataCloneError');
  };
  const clone = (v, seen) => {
    if (typeof v === 'function' || typeof v === 'symbol') throw cloneError(typeof v);
    if (v === null || typeof v !== 'object') return v;
    if (seen.has(v)) return seen.get(v);
    let out;
    if (v instanceof Date) out = new Date(v.getTime());
    else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
    else if (v instanceof ArrayBuffer) out = v.slice(0);
    else if (v instanceof DataView) out = new DataView(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
    else if (ArrayBuffer.isView(v)) out = new v.constructor(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
    else if (v instanceof Error) out = named(new Error(v.message), v.name);
    else if (v instanceof Map) {
      out = new Map();
      seen.set(v, out);
      for (const [k, x] of v) out.set(clone(k, seen), clone(x, seen));
      return out;
    } else if (v instanceof Set) {
      out = new Set();
      seen.set(v, out);
      for (const x of v) out.add(clone(x, seen));
      return out;
    } else if (Array.isArray(v)) {
      out = [];
      seen.set(v, out);
      for (let i = 0; i < v.length; i++) out[i] = clone(v[i], seen);
      return out;
    } else if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet) {
      throw cloneError(Object.prototype.toString.call(v));
    } else {
      out = {};
      seen.set(v, out);
      for (const k of Object.keys(v)) out[k] = clone(v[k], seen);
      return out;
    }
    seen.set(v, out);
    return out;
  };
  def('structuredClone', (value) => clone(value, new Map()));

  // ---- URLSearchParams (application/x-www-form-urlencoded) ----
  const formDecode = (s) => {
    const t = s.replace(/\+/g, ' ');
    try { return decodeURIComponent(t); } catch (_) { return t; }
  };
  const formEncode = (s) => encodeURIComponent(String(s))
    .replace(/%20/g, '+')
    .replace(/[!'()~]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
  const LIST = Symbol('list'), OWNER = Symbol('owner');
  class URLSearchParams {
    constructor(init = '') {
      this[LIST] = [];
      this[OWNER] = null;
      if (init instanceof URLSearchParams) this[LIST] = init[LIST].map((p) => [p[0], p[1]]);
      else if (typeof init === 'object' && init !== null) {
        const entries = typeof init[Symbol.iterator] === 'function' ? init : Object.entries(init);
        for (const pair of entries) {
          const [k, v] = Array.from(pair);
          this[LIST].push([String(k), String(v)]);
        }
      } else this._parse(String(init));
    }
    _parse(s) {
      this[LIST] = [];
      for (const part of s.replace(/^\?/, '').split('&')) {
        if (part === '') continue;
        const at = part.indexOf('=');
        const k = at < 0 ? part : part.slice(0, at), v = at < 0 ? '' : part.slice(at + 1);
        this[LIST].push([formDecode(k), formDecode(v)]);
      }
    }
    _update() { if (this[OWNER]) this[OWNER]._setSearch(this.toString()); }
    get size() { return this[LIST].length; }
    append(k, v) { this[LIST].push([String(k), String(v)]); this._update(); }
    delete(k, v) {
      k = String(k);
      this[LIST] = this[LIST].filter((p) => !(p[0] === k && (v === undefined || p[1] === String(v))));
      this._update();
    }
    get(k) { const p = this[LIST].find((q) => q[0] === String(k)); return p ? p[1] : null; }
    getAll(k) { return this[LIST].filter((q) => q[0] === String(k)).map((q) => q[1]); }
    has(k, v) { return this[LIST].some((q) => q[0] === String(k) && (v === undefined || q[1] === String(v))); }
    set(k, v) {
      k = String(k); v = String(v);
      const i = this[LIST].findIndex((q) => q[0] === k);
      if (i < 0) this[LIST].push([k, v]);
      else { this[LIST][i][1] = v; this[LIST] = this[LIST].filter((q, j) => j <= i || q[0] !== k); }
      this._update();
    }
    sort() { this[LIST].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)); this._update(); }
    forEach(f, self) { for (const [k, v] of this[LIST]) f.call(self, v, k, this); }
    keys() { return this[LIST].map((p) => p[0])[Symbol.iterator](); }
    values() { return this[LIST].map((p) => p[1])[Symbol.iterator](); }
    entries() { return this[LIST].map((p) => [p[0], p[1]])[Symbol.iterator](); }
    [Symbol.iterator]() { return this.entries(); }
    toString() { return this[LIST].map(([k, v]) => formEncode(k) + '=' + formEncode(v)).join('&'); }
  }
  def('URLSearchParams', URLSearchParams);

  // ---- URL (parsed by the WHATWG parser of Rust's `url` crate) ----
  const PARTS = Symbol('parts'), PARAMS = Symbol('params');
  const parse = (input, base) => {
    const text = urlParse(String(input), base === undefined ? null : String(base));
    if (text.charAt(0) !== '{') throw new TypeError(`Invalid URL: ${text}`);
    return JSON.parse(text);
  };
  class URL {
    constructor(input, base) {
      this[PARTS] = parse(input, base);
      this[PARAMS] = null;
    }
    static canParse(input, base) { try { parse(input, base); return true; } catch (_) { return false; } }
    _set(href) { this[PARTS] = parse(href); if (this[PARAMS]) this[PARAMS]._parse(this[PARTS].search); }
    _setSearch(query) {
      const p = this[PARTS];
      this[PARTS] = parse(p.href.split('#')[0].split('?')[0] + (query ? '?' + query : '') + p.hash);
    }
    get href() { return this[PARTS].href; }
    set href(v) { this._set(v); }
    get origin() { return this[PARTS].origin; }
    get protocol() { return this[PARTS].protocol; }
    get username() { return this[PARTS].username; }
    get password() { return this[PARTS].password; }
    get host() { return this[PARTS].host; }
    get hostname() { return this[PARTS].hostname; }
    get port() { return this[PARTS].port; }
    get pathname() { return this[PARTS].pathname; }
    set pathname(v) {
      const p = this[PARTS];
      this._set(p.origin !== 'null' ? p.protocol + '//' + (p.username ? p.username + (p.password ? ':' + p.password : '') + '@' : '') + p.host + (String(v).startsWith('/') ? '' : '/') + v + p.search + p.hash : p.href);
    }
    get search() { return this[PARTS].search; }
    set search(v) { this._setSearch(String(v).replace(/^\?/, '')); if (this[PARAMS]) this[PARAMS]._parse(this[PARTS].search); }
    get hash() { return this[PARTS].hash; }
    set hash(v) { const h = String(v).replace(/^#/, ''); this._set(this[PARTS].href.split('#')[0] + (h ? '#' + h : '')); }
    get searchParams() {
      if (!this[PARAMS]) { this[PARAMS] = new URLSearchParams(this[PARTS].search); this[PARAMS][OWNER] = this; }
      return this[PARAMS];
    }
    toString() { return this.href; }
    toJSON() { return this.href; }
  }
  def('URL', URL);

  // ---- Buffer (a subset of Node's: from/alloc/concat/byteLength/isBuffer, toString) ----
  const enc = (e) => String(e || 'utf8').toLowerCase().replace('-', '');
  const utf8 = (s) => new TextEncoder().encode(s);
  const latin1 = (s) => { const b = new U8(s.length); for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i) & 0xff; return b; };
  const binaryOf = (b) => { let s = ''; for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode.apply(null, b.subarray(i, i + 0x8000)); return s; };
  const bytesFrom = (s, e) => {
    switch (enc(e)) {
      case 'utf8': return utf8(s);
      case 'hex': { const n = s.length >> 1, b = new U8(n); for (let i = 0; i < n; i++) { const x = parseInt(s.substr(i * 2, 2), 16); if (Number.isNaN(x)) return b.subarray(0, i); b[i] = x; } return b; }
      case 'base64': case 'base64url': {
        const t = s.replace(/-/g, '+').replace(/_/g, '/').replace(/[^A-Za-z0-9+/]/g, '');
        return latin1(atob(t + '==='.slice((t.length + 3) % 4)));
      }
      case 'latin1': case 'binary': case 'ascii': return latin1(s);
      default: throw new TypeError(`Unknown encoding: ${e}`);
    }
  };
  class Buffer extends U8 {
    static from(v, e, length) {
      if (typeof v === 'string') { const b = bytesFrom(v, e); return new Buffer(b.buffer, b.byteOffset, b.byteLength); }
      if (v instanceof ArrayBuffer) return new Buffer(v, e || 0, length === undefined ? v.byteLength - (e || 0) : length);
      if (ArrayBuffer.isView(v)) { const b = new Buffer(v.byteLength); b.set(new U8(v.buffer, v.byteOffset, v.byteLength)); return b; }
      if (v && typeof v === 'object' && v.type === 'Buffer' && Array.isArray(v.data)) return Buffer.from(v.data);
      if (v && typeof v.length === 'number') { const b = new Buffer(v.length); for (let i = 0; i < v.length; i++) b[i] = v[i] & 0xff; return b; }
      throw new TypeError('Buffer.from expects a string, an array, an ArrayBuffer or a typed array');
    }
    static alloc(n, fill) { const b = new Buffer(n); if (fill !== undefined) b.fill(typeof fill === 'string' ? fill.charCodeAt(0) : fill); return b; }
    static allocUnsafe(n) { return new Buffer(n); }
    static isBuffer(b) { return b instanceof Buffer; }
    static isEncoding(e) { return ['utf8', 'hex', 'base64', 'base64url', 'latin1', 'binary', 'ascii'].includes(enc(e)); }
    static byteLength(v, e) { return typeof v === 'string' ? bytesFrom(v, e).length : v.byteLength; }
    static concat(list, total) {
      const size = total === undefined ? list.reduce((n, b) => n + b.length, 0) : total;
      const out = new Buffer(size);
      let at = 0;
      for (const b of list) { if (at >= size) break; const part = b.subarray(0, size - at); out.set(part, at); at += part.length; }
      return out;
    }
    toString(e, start = 0, end = this.length) {
      const b = U8.prototype.subarray.call(this, start, end);
      switch (enc(e)) {
        case 'utf8': return new TextDecoder().decode(b);
        case 'hex': return hex(b);
        case 'base64': return btoa(binaryOf(b));
        case 'base64url': return btoa(binaryOf(b)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
        case 'latin1': case 'binary': return binaryOf(b);
        case 'ascii': return binaryOf(b.map((x) => x & 0x7f));
        default: throw new TypeError(`Unknown encoding: ${e}`);
      }
    }
    equals(other) { if (this.length !== other.length) return false; for (let i = 0; i < this.length; i++) if (this[i] !== other[i]) return false; return true; }
    toJSON() { return { type: 'Buffer', data: Array.from(this) }; }
    slice(start, end) { return this.subarray(start, end); }
  }
  def('Buffer', Buffer);
})
