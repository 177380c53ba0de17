// Installed once per context. Receives the native bridge functions as arguments so that none
// of them is reachable as a global; captures the builtins it uses so that user code that
// replaces JSON.parse or Array.prototype.map cannot break the bridge of its own context.
(function (host, log, b64e, b64d, sleep, fetchNative, opts) {
  'use strict';
  const network = opts.network === true, harden = opts.harden === true;
  const G = globalThis;
  const parse = JSON.parse, stringify = JSON.stringify;
  const U8 = Uint8Array, AB = ArrayBuffer, isView = ArrayBuffer.isView;
  const Err = Error, Str = String, ProxyCtor = Proxy, MapCtor = Map;
  const fromCharCode = String.fromCharCode;
  const keys = Object.keys, defineProperty = Object.defineProperty, freeze = Object.freeze;
  const isArray = Array.isArray;
  const MARK = '__bytes_base64';
  // Prototype methods used by the bridge, detached now (user code may replace them later).
  const uncurry = Function.prototype.call.bind.bind(Function.prototype.call);
  const apply = Reflect.apply;
  const sliceStr = uncurry(String.prototype.slice), charCodeAt = uncurry(String.prototype.charCodeAt);
  const indexOf = uncurry(String.prototype.indexOf), toLower = uncurry(String.prototype.toLowerCase);
  const subarray = uncurry(Object.getPrototypeOf(Uint8Array.prototype).subarray);
  const arrMap = uncurry(Array.prototype.map), join = uncurry(Array.prototype.join);
  const mapGet = uncurry(Map.prototype.get), mapSet = uncurry(Map.prototype.set);
  const mapHas = uncurry(Map.prototype.has), mapDelete = uncurry(Map.prototype.delete);
  const then = uncurry(Promise.prototype.then);

  // Bytes cross as latin1 "binary strings" (one char per byte) so the native side never has
  // to read engine memory directly; the native side turns them into base64.
  const toBinary = (u8) => {
    let s = '';
    for (let i = 0; i < u8.length; i += 8192) {
      s += apply(fromCharCode, null, subarray(u8, i, i + 8192));
    }
    return s;
  };
  const bytesOf = (v) => {
    if (v instanceof U8) return v;
    if (v instanceof AB) return new U8(v);
    if (isView(v)) return new U8(v.buffer, v.byteOffset, v.byteLength);
    return null;
  };
  function replacer(_k, v) {
    if (v !== null && typeof v === 'object') {
      const b = bytesOf(v);
      if (b !== null) return { [MARK]: b64e(toBinary(b)) };
    }
    return v;
  }
  function reviver(_k, v) {
    if (v !== null && typeof v === 'object' && !isArray(v) && typeof v[MARK] === 'string' && keys(v).length === 1) {
      return b64d(v[MARK]);
    }
    return v;
  }
  const encode = (v) => {
    const s = stringify(v, replacer);
    return s === undefined ? 'null' : s;
  };
  const decode = (s) => (indexOf(s, MARK) >= 0 ? parse(s, reviver) : parse(s));

  // Host answers are tagged: '1' JSON value, 's' raw text (parsed when it is JSON), '0' error.
  const settle = (r, site) => {
    const tag = charCodeAt(r, 0), body = sliceStr(r, 1);
    if (tag === 49) return decode(body);
    if (tag === 115) {
      try { return decode(body); } catch (_) { return body; }
    }
    const e = parse(body);
    const err = new Err(e.message);
    err.code = e.code;
    // The frames at the call site (the caller is suspended, so not on the stack now).
    if (site !== undefined) err.stack = site.stack;
    throw err;
  };
  const invalid = (msg) => {
    const err = new Err(msg);
    err.code = 'INVALID_INPUT';
    return err;
  };

  const methods = new MapCtor();
  const method = (name) => {
    let f = mapGet(methods, name);
    if (f === undefined) {
      f = async function (...a) {
        if (a.length > 1) throw invalid(`adf.${name} takes one object argument, got ${a.length} arguments`);
        let args = a[0];
        if (args === undefined) args = {};
        if (args === null || typeof args !== 'object' || isArray(args) || bytesOf(args) !== null) {
          throw invalid(`adf.${name} takes one object argument ({ ... }), got ${args === null ? 'null' : isArray(args) ? 'an array' : typeof args}`);
        }
        const site = new Err();
        return settle(await host(name, encode(args)), site);
      };
      mapSet(methods, name, f);
    }
    return f;
  };
  // `then` must be undefined or `await adf` would treat the proxy as a thenable; `toJSON` is
  // the other hook the engine calls implicitly (JSON.stringify(adf)).
  const adf = new ProxyCtor(Object.create(null), {
    get(_t, name) {
      if (typeof name !== 'string' || name === 'then' || name === 'toJSON') return undefined;
      return method(name);
    },
    has(_t, name) { return typeof name === 'string' && name !== 'then' && name !== 'toJSON'; },
    set() { return false; },
    defineProperty() { return false; },
    deleteProperty() { return false; },
    setPrototypeOf() { return false; },
  });
  defineProperty(G, 'adf', { value: adf, writable: false, enumerable: false, configurable: false });

  // console: formatted here, captured (and capped) natively.
  const show = (x) => {
    if (typeof x === 'string') return x;
    try {
      if (x instanceof Err) return x.stack ? `${x.name}: ${x.message}\n${x.stack}` : `${x.name}: ${x.message}`;
      if (typeof x === 'function') return `[Function ${x.name || 'anonymous'}]`;
      if (typeof x === 'bigint') return `${x}n`;
      if (typeof x === 'symbol' || x === undefined) return Str(x);
      const s = stringify(x, (_k, v) => (bytesOf(v) !== null && typeof v === 'object' ? `Uint8Array(${bytesOf(v).length})` : typeof v === 'bigint' ? `${v}n` : v));
      return s === undefined ? Str(x) : s;
    } catch (_) {
      try { return Str(x); } catch (_) { return '[unprintable]'; }
    }
  };
  const logger = (level) => (...a) => { log(level, join(arrMap(a, show), ' ')); };
  G.console = freeze({
    log: logger('log'), info: logger('info'), debug: logger('debug'),
    warn: logger('warn'), error: logger('error'), trace: logger('debug'),
  });

  // Timers live within one execution: the native sleep resolves `false` when the execution
  // ends, and the callback is then skipped.
  let nextId = 1;
  const timers = new MapCtor();
  G.setTimeout = (fn, ms, ...a) => {
    const id = nextId++;
    mapSet(timers, id, true);
    then(sleep(+ms || 0), (ok) => {
      if (ok && mapDelete(timers, id) && typeof fn === 'function') fn(...a);
    });
    return id;
  };
  G.setInterval = (fn, ms, ...a) => {
    const id = nextId++;
    mapSet(timers, id, true);
    const tick = () => then(sleep(+ms || 0), (ok) => {
      if (!ok || !mapHas(timers, id)) return;
      try { if (typeof fn === 'function') fn(...a); } finally { tick(); }
    });
    tick();
    return id;
  };
  G.clearTimeout = G.clearInterval = (id) => { mapDelete(timers, id); };

  // TextEncoder/TextDecoder (UTF-8 only) are small and often needed with bytes.
  G.TextEncoder = class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(s = '') { return b64d(b64e(unescape(encodeURIComponent(Str(s))))); }
  };
  G.TextDecoder = class TextDecoder {
    get encoding() { return 'utf-8'; }
    decode(b) {
      const u8 = b === undefined ? new U8(0) : bytesOf(b);
      if (u8 === null) throw new TypeError('TextDecoder.decode expects bytes');
      try { return decodeURIComponent(escape(toBinary(u8))); } catch (_) { return toBinary(u8); }
    }
  };

  if (network) {
    const headersOf = (h) => {
      const out = {};
      if (h && typeof h === 'object') {
        const entries = typeof h.entries === 'function' && !isArray(h) ? [...h.entries()] : isArray(h) ? h : Object.entries(h);
        for (const [k, v] of entries) out[Str(k).toLowerCase()] = Str(v);
      }
      return out;
    };
    G.fetch = async (input, init = {}) => {
      const url = typeof input === 'string' ? input : input && input.url ? Str(input.url) : Str(input);
      const req = {
        url,
        method: Str(init.method || 'GET').toUpperCase(),
        headers: headersOf(init.headers),
        body: init.body === undefined || init.body === null ? null : bytesOf(init.body) !== null ? init.body : Str(init.body),
      };
      const r = settle(await fetchNative(encode(req)));
      const h = headersOf(r.headers);
      const body = r.body === undefined || r.body === null ? '' : r.body;
      const text = () => (typeof body === 'string' ? body : new G.TextDecoder().decode(body));
      const bytes = () => (typeof body === 'string' ? new G.TextEncoder().encode(body) : body);
      return {
        ok: r.status >= 200 && r.status < 300,
        status: r.status,
        statusText: r.statusText || '',
        url: r.url || url,
        headers: {
          get: (n) => (h[Str(n).toLowerCase()] ?? null),
          has: (n) => Str(n).toLowerCase() in h,
          entries: () => Object.entries(h)[Symbol.iterator](),
          forEach: (f) => { for (const [k, v] of Object.entries(h)) f(v, k); },
        },
        text: async () => text(),
        json: async () => parse(text()),
        arrayBuffer: async () => { const b = bytes(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); },
        bytes: async () => bytes(),
      };
    };
  }

  const internal = freeze({ encode, decode });
  defineProperty(G, '__adf_internal', { value: internal, writable: false, enumerable: false, configurable: false });

  // The persistent context outlives each execution: freeze the intrinsics (as the reference
  // does) so one execution cannot pollute prototypes for the next. Globals stay writable.
  if (harden) {
    const names = ['Object', 'Function', 'Array', 'String', 'Number', 'Boolean', 'Symbol', 'BigInt',
      'Promise', 'Map', 'Set', 'WeakMap', 'WeakSet', 'WeakRef', 'RegExp', 'Date', 'Error', 'TypeError',
      'RangeError', 'SyntaxError', 'ReferenceError', 'EvalError', 'URIError', 'AggregateError',
      'ArrayBuffer', 'SharedArrayBuffer', 'DataView', 'Uint8Array', 'Int8Array', 'Uint8ClampedArray',
      'Uint16Array', 'Int16Array', 'Uint32Array', 'Int32Array', 'Float32Array', 'Float64Array',
      'BigInt64Array', 'BigUint64Array', 'Proxy', 'TextEncoder', 'TextDecoder'];
    for (const n of names) {
      const c = G[n];
      if (c === undefined) continue;
      if (c.prototype) freeze(c.prototype);
      freeze(c);
    }
    freeze(Object.getPrototypeOf(Uint8Array));
    freeze(Object.getPrototypeOf(Uint8Array.prototype));
    freeze(Object.getPrototypeOf(async function () {}));
    freeze(Object.getPrototypeOf(function* () {}));
    freeze(Object.getPrototypeOf([][Symbol.iterator]()));
    for (const n of ['JSON', 'Math', 'Reflect', 'Atomics']) if (G[n] !== undefined) freeze(G[n]);
  }
})
