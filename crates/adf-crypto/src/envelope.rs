//! Envelopes (§8.3, §8.4, Appendix A.8): one random 32-byte DEK per envelope (`identity`,
//! `credentials`), wrapped into key slots (ephemeral X25519 + HKDF-SHA256 + AES-256-GCM) and
//! optional scrypt password slots; sealed rows are `iv(12) ‖ ciphertext ‖ tag(16)` under the DEK.
//!
//! The descriptor is kept as typed slots but serialized by hand so the stored JSON matches the
//! reference byte for byte (`{"v":1,"slots":[…]}` with the reference's member order), and slots
//! of unknown types survive a read-modify-write untouched.

use rand::CryptoRng;
use serde_json::{Map, Value, json};
use x25519_dalek::{PublicKey as XPublic, StaticSecret};
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::keys::{
    aes_gcm_decrypt, aes_gcm_encrypt, b64, b64_array, b64_decode, random_bytes, x25519_hkdf,
};
use crate::owner::PublicIdentity;

/// HKDF info prefix of key slots; the envelope name follows.
pub const ENVELOPE_INFO_PREFIX: &str = "adf-envelope-v1:";

/// The two envelopes of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EnvelopeName {
    /// Covers `crypto:signing:private_key`; never gets a password slot.
    Identity,
    /// Covers every non-`crypto:*` secret.
    Credentials,
}

impl EnvelopeName {
    /// Both envelopes, in provisioning order.
    pub const ALL: [EnvelopeName; 2] = [EnvelopeName::Identity, EnvelopeName::Credentials];

    /// `identity` / `credentials`.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvelopeName::Identity => "identity",
            EnvelopeName::Credentials => "credentials",
        }
    }
    /// `adf_identity.encryption_algo` of rows sealed under this envelope (`env:<name>`).
    pub fn encryption_algo(self) -> &'static str {
        match self {
            EnvelopeName::Identity => "env:identity",
            EnvelopeName::Credentials => "env:credentials",
        }
    }
    /// Purpose of the descriptor row (`crypto:envelope:<name>`).
    pub fn descriptor_purpose(self) -> &'static str {
        match self {
            EnvelopeName::Identity => "crypto:envelope:identity",
            EnvelopeName::Credentials => "crypto:envelope:credentials",
        }
    }
    /// Parse `env:identity` / `env:credentials`.
    pub fn from_encryption_algo(algo: &str) -> Option<Self> {
        match algo {
            "env:identity" => Some(EnvelopeName::Identity),
            "env:credentials" => Some(EnvelopeName::Credentials),
            _ => None,
        }
    }
    /// Which envelope seals a purpose (\[C28\]): the private key → identity, other `crypto:*` →
    /// none (stored plain), everything else → credentials.
    pub fn for_purpose(purpose: &str) -> Option<Self> {
        if purpose == "crypto:signing:private_key" {
            Some(EnvelopeName::Identity)
        } else if purpose.starts_with("crypto:") {
            None
        } else {
            Some(EnvelopeName::Credentials)
        }
    }
    fn info(self) -> Vec<u8> {
        format!("{ENVELOPE_INFO_PREFIX}{}", self.as_str()).into_bytes()
    }
}

/// A data-encryption key. Zeroized on drop; Debug never shows the bytes.
#[derive(Clone)]
pub struct Dek(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for Dek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dek(<redacted>)")
    }
}

impl PartialEq for Dek {
    fn eq(&self, other: &Self) -> bool {
        // Constant time: DEK comparison is rare but must not leak via timing.
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Dek {
    /// A fresh random DEK from `rand::rng()`.
    pub fn generate() -> Self {
        Self::generate_with(&mut rand::rng())
    }
    /// A fresh DEK from a caller-supplied CSPRNG.
    pub fn generate_with<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        Dek(Zeroizing::new(random_bytes::<32, R>(rng)))
    }
    /// Wrap known bytes (interop vectors, tests).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Dek(Zeroizing::new(bytes))
    }
    /// The raw key (for handing to AES; never persist it).
    pub fn expose_secret(&self) -> &[u8; 32] {
        &self.0
    }
}

/// Who a key slot is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// The owner's X25519 key (mnemonic-derived).
    Owner,
    /// A runtime installation's X25519 key.
    Runtime,
}

impl SlotKind {
    fn as_str(self) -> &'static str {
        match self {
            SlotKind::Owner => "owner",
            SlotKind::Runtime => "runtime",
        }
    }
}

/// A DEK wrapped to one X25519 recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySlot {
    /// owner / runtime.
    pub kind: SlotKind,
    /// Label only; the cryptographic recipient is whoever holds the X25519 secret.
    pub recipient_did: String,
    /// Raw ephemeral X25519 public key.
    pub ephemeral_pub: [u8; 32],
    /// AES-GCM IV.
    pub iv: [u8; 12],
    /// `AES-256-GCM(wrapKey, iv, DEK)` = 32 bytes ciphertext + 16 bytes tag.
    pub wrapped_dek: Vec<u8>,
}

/// scrypt parameters as recorded in a password slot (`{"N":…,"r":…,"p":…}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScryptParams {
    /// CPU/memory cost (a power of two).
    pub n: u64,
    /// Block size.
    pub r: u32,
    /// Parallelism.
    pub p: u32,
}

impl Default for ScryptParams {
    /// The spec's parameters: N = 2^17, r = 8, p = 1.
    fn default() -> Self {
        ScryptParams {
            n: 131_072,
            r: 8,
            p: 1,
        }
    }
}

/// Upper bound on scrypt memory (128·r·N bytes) a descriptor may demand; the default uses 128 MiB.
const MAX_SCRYPT_MEMORY: u128 = 1 << 30;

impl ScryptParams {
    fn derive(&self, password: &str, salt: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        if self.n < 2 || !self.n.is_power_of_two() {
            return Err(Error::Kdf(format!(
                "scrypt N={} is not a power of two",
                self.n
            )));
        }
        if 128u128 * u128::from(self.r) * u128::from(self.n) > MAX_SCRYPT_MEMORY || self.p > 16 {
            return Err(Error::Kdf(
                "scrypt parameters exceed the allowed cost".into(),
            ));
        }
        let log_n = self.n.trailing_zeros() as u8;
        let params = scrypt::Params::new(log_n, self.r, self.p)
            .map_err(|_| Error::Kdf("invalid scrypt parameters".into()))?;
        let mut out = Zeroizing::new([0u8; 32]);
        scrypt::scrypt(password.as_bytes(), salt, &params, out.as_mut_slice())
            .map_err(|_| Error::Kdf("scrypt output length".into()))?;
        Ok(out)
    }
}

/// A DEK wrapped under a password-derived key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordSlot {
    /// Always `scrypt` for slots we can open.
    pub kdf: String,
    /// Recorded KDF parameters.
    pub params: ScryptParams,
    /// KDF salt (32 random bytes).
    pub salt: Vec<u8>,
    /// AES-GCM IV.
    pub iv: [u8; 12],
    /// Wrapped DEK (ciphertext ‖ tag).
    pub wrapped_dek: Vec<u8>,
}

/// One slot of a descriptor.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot {
    /// owner / runtime X25519 slot.
    Key(KeySlot),
    /// scrypt password slot.
    Password(PasswordSlot),
    /// A slot type this version does not know; preserved verbatim.
    Unknown(Value),
}

/// The `crypto:envelope:<name>` row value.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvelopeDescriptor {
    /// Format version (1).
    pub v: u64,
    /// Slots in stored order.
    pub slots: Vec<Slot>,
}

/// Which way an envelope was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlockedVia {
    /// A runtime slot opened with this installation's key.
    Runtime,
    /// An owner slot opened with the owner key (the caller should then add a runtime slot).
    Owner,
    /// A password slot.
    Password,
}

/// The X25519 secrets an installation holds. Either may be absent.
#[derive(Clone, Copy, Default)]
pub struct UnlockKeys<'a> {
    /// This installation's runtime encryption secret.
    pub runtime: Option<&'a StaticSecret>,
    /// The owner's encryption secret (only when the mnemonic/owner keystore is available).
    pub owner: Option<&'a StaticSecret>,
}

impl std::fmt::Debug for UnlockKeys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnlockKeys")
            .field("runtime", &self.runtime.map(|_| "<redacted>"))
            .field("owner", &self.owner.map(|_| "<redacted>"))
            .finish()
    }
}

/// The four states of §8.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeState {
    /// DEK held for this open file.
    Unlocked,
    /// A password slot exists and has not been opened.
    Locked,
    /// Slots exist, none opens with this installation's keys.
    Foreign,
    /// No descriptor row.
    Absent,
}

impl EnvelopeState {
    /// `unlocked` / `locked` / `foreign` / `absent`.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvelopeState::Unlocked => "unlocked",
            EnvelopeState::Locked => "locked",
            EnvelopeState::Foreign => "foreign",
            EnvelopeState::Absent => "absent",
        }
    }
}

/// §8.4 state as \[C28\] computes it: DEK held ⇒ unlocked; no descriptor ⇒ absent; any password
/// slot ⇒ locked; otherwise foreign.
pub fn envelope_state(descriptor: Option<&EnvelopeDescriptor>, dek_held: bool) -> EnvelopeState {
    match descriptor {
        _ if dek_held => EnvelopeState::Unlocked,
        None => EnvelopeState::Absent,
        Some(d) if d.has_password_slot() => EnvelopeState::Locked,
        Some(_) => EnvelopeState::Foreign,
    }
}

// ---------------------------------------------------------------------------------------------
// slots

/// Wrap `dek` for a recipient with fresh randomness.
pub fn create_key_slot<R: CryptoRng + ?Sized>(
    envelope: EnvelopeName,
    dek: &Dek,
    kind: SlotKind,
    recipient: &PublicIdentity,
    rng: &mut R,
) -> Result<KeySlot> {
    let eph = Zeroizing::new(random_bytes::<32, R>(rng));
    let iv = random_bytes::<12, R>(rng);
    create_key_slot_with(envelope, dek, kind, recipient, &eph, iv)
}

/// Deterministic form of [`create_key_slot`]: caller supplies the ephemeral secret and IV.
pub fn create_key_slot_with(
    envelope: EnvelopeName,
    dek: &Dek,
    kind: SlotKind,
    recipient: &PublicIdentity,
    ephemeral_secret: &[u8; 32],
    iv: [u8; 12],
) -> Result<KeySlot> {
    let eph = StaticSecret::from(*ephemeral_secret);
    let eph_pub = XPublic::from(&eph).to_bytes();
    let wrap = x25519_hkdf(&eph, &recipient.x25519(), &eph_pub, &envelope.info());
    let wrapped_dek = aes_gcm_encrypt(&wrap, &iv, dek.expose_secret())?;
    Ok(KeySlot {
        kind,
        recipient_did: recipient.did.clone(),
        ephemeral_pub: eph_pub,
        iv,
        wrapped_dek,
    })
}

/// Unwrap a key slot with the recipient's X25519 secret.
pub fn open_key_slot(envelope: EnvelopeName, slot: &KeySlot, secret: &StaticSecret) -> Result<Dek> {
    let wrap = x25519_hkdf(
        secret,
        &XPublic::from(slot.ephemeral_pub),
        &slot.ephemeral_pub,
        &envelope.info(),
    );
    let what = format!(
        "{} key slot of the {} envelope",
        slot.kind.as_str(),
        envelope.as_str()
    );
    dek_from_plain(aes_gcm_decrypt(&wrap, &slot.iv, &slot.wrapped_dek, &what)?)
}

fn dek_from_plain(pt: Zeroizing<Vec<u8>>) -> Result<Dek> {
    let arr = <[u8; 32]>::try_from(pt.as_slice())
        .map_err(|_| Error::InvalidDescriptor("wrapped DEK is not 32 bytes".into()))?;
    Ok(Dek::from_bytes(arr))
}

/// Wrap `dek` under a password. Refused for the identity envelope.
pub fn create_password_slot<R: CryptoRng + ?Sized>(
    envelope: EnvelopeName,
    dek: &Dek,
    password: &str,
    params: ScryptParams,
    rng: &mut R,
) -> Result<PasswordSlot> {
    let salt = random_bytes::<32, R>(rng);
    let iv = random_bytes::<12, R>(rng);
    create_password_slot_with(envelope, dek, password, params, salt, iv)
}

/// Deterministic form of [`create_password_slot`].
pub fn create_password_slot_with(
    envelope: EnvelopeName,
    dek: &Dek,
    password: &str,
    params: ScryptParams,
    salt: [u8; 32],
    iv: [u8; 12],
) -> Result<PasswordSlot> {
    if envelope == EnvelopeName::Identity {
        return Err(Error::PasswordSlotOnIdentity);
    }
    let key = params.derive(password, &salt)?;
    Ok(PasswordSlot {
        kdf: "scrypt".into(),
        params,
        salt: salt.to_vec(),
        iv,
        wrapped_dek: aes_gcm_encrypt(&key, &iv, dek.expose_secret())?,
    })
}

/// Open a password slot. A wrong password is [`Error::WrongPassword`].
pub fn open_password_slot(slot: &PasswordSlot, password: &str) -> Result<Dek> {
    if slot.kdf != "scrypt" {
        return Err(Error::Kdf(format!(
            "password slot KDF `{}` is not scrypt",
            slot.kdf
        )));
    }
    let key = slot.params.derive(password, &slot.salt)?;
    let pt = aes_gcm_decrypt(&key, &slot.iv, &slot.wrapped_dek, "password slot")
        .map_err(|_| Error::WrongPassword)?;
    dek_from_plain(pt)
}

// ---------------------------------------------------------------------------------------------
// sealed values

/// Seal a value under a DEK: `iv(12) ‖ ciphertext ‖ tag(16)`.
pub fn seal<R: CryptoRng + ?Sized>(dek: &Dek, plaintext: &[u8], rng: &mut R) -> Result<Vec<u8>> {
    seal_with_iv(dek, plaintext, random_bytes::<12, R>(rng))
}

/// Deterministic form of [`seal`].
pub fn seal_with_iv(dek: &Dek, plaintext: &[u8], iv: [u8; 12]) -> Result<Vec<u8>> {
    let ct = aes_gcm_encrypt(dek.expose_secret(), &iv, plaintext)?;
    let mut out = Vec::with_capacity(12 + ct.len());
    out.extend_from_slice(&iv);
    out.extend_from_slice(&ct);
    Ok(out)
}

/// Open a sealed value.
pub fn open_sealed(dek: &Dek, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    if sealed.len() < 12 + 16 {
        return Err(Error::Decrypt("sealed value shorter than IV + tag".into()));
    }
    let mut iv = [0u8; 12];
    iv.copy_from_slice(&sealed[..12]);
    aes_gcm_decrypt(dek.expose_secret(), &iv, &sealed[12..], "sealed value")
}

// ---------------------------------------------------------------------------------------------
// descriptor

impl EnvelopeDescriptor {
    /// A descriptor with owner + runtime slots for a DEK (provisioning and recipient adoption).
    pub fn for_recipients<R: CryptoRng + ?Sized>(
        envelope: EnvelopeName,
        dek: &Dek,
        owner: Option<&PublicIdentity>,
        runtime: Option<&PublicIdentity>,
        rng: &mut R,
    ) -> Result<Self> {
        let mut slots = Vec::new();
        if let Some(o) = owner {
            slots.push(Slot::Key(create_key_slot(
                envelope,
                dek,
                SlotKind::Owner,
                o,
                rng,
            )?));
        }
        if let Some(r) = runtime {
            slots.push(Slot::Key(create_key_slot(
                envelope,
                dek,
                SlotKind::Runtime,
                r,
                rng,
            )?));
        }
        Ok(EnvelopeDescriptor { v: 1, slots })
    }

    /// Parse the stored row value (UTF-8 JSON). A bare slot array is read as version 1.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Self> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|_| Error::InvalidDescriptor("not JSON".into()))?;
        let (ver, slots) = match &v {
            Value::Object(m) => (
                m.get("v").and_then(Value::as_u64).unwrap_or(1),
                m.get("slots")
                    .and_then(Value::as_array)
                    .ok_or_else(|| Error::InvalidDescriptor("missing `slots` array".into()))?,
            ),
            Value::Array(a) => (1, a),
            _ => return Err(Error::InvalidDescriptor("expected an object".into())),
        };
        let slots = slots.iter().map(parse_slot).collect::<Result<Vec<_>>>()?;
        Ok(EnvelopeDescriptor { v: ver, slots })
    }

    /// The JSON value as the reference writes it.
    pub fn to_json_value(&self) -> Value {
        json!({"v": self.v, "slots": self.slots.iter().map(slot_to_json).collect::<Vec<_>>()})
    }

    /// Row bytes for `crypto:envelope:<name>` (`encryption_algo = 'plain'`).
    pub fn to_json_bytes(&self) -> Vec<u8> {
        self.to_json_value().to_string().into_bytes()
    }

    /// True if any slot is a password slot.
    pub fn has_password_slot(&self) -> bool {
        self.slots.iter().any(|s| matches!(s, Slot::Password(_)))
    }

    /// Key slots of one kind.
    pub fn key_slots(&self, kind: SlotKind) -> impl Iterator<Item = &KeySlot> {
        self.slots.iter().filter_map(move |s| match s {
            Slot::Key(k) if k.kind == kind => Some(k),
            _ => None,
        })
    }

    /// The unlock cascade: runtime slots with the runtime key, then owner slots with the owner
    /// key. Password slots are only tried on demand ([`Self::unlock_with_password`]).
    pub fn unlock(
        &self,
        envelope: EnvelopeName,
        keys: &UnlockKeys<'_>,
    ) -> Result<(Dek, UnlockedVia)> {
        if let Some(rt) = keys.runtime {
            for slot in self.key_slots(SlotKind::Runtime) {
                if let Ok(dek) = open_key_slot(envelope, slot, rt) {
                    return Ok((dek, UnlockedVia::Runtime));
                }
            }
        }
        if let Some(owner) = keys.owner {
            for slot in self.key_slots(SlotKind::Owner) {
                if let Ok(dek) = open_key_slot(envelope, slot, owner) {
                    return Ok((dek, UnlockedVia::Owner));
                }
            }
        }
        Err(Error::NoSlotOpens(envelope.as_str().into()))
    }

    /// Try every password slot.
    pub fn unlock_with_password(&self, envelope: EnvelopeName, password: &str) -> Result<Dek> {
        let mut last = Error::NoSlotOpens(envelope.as_str().into());
        for slot in &self.slots {
            if let Slot::Password(p) = slot {
                match open_password_slot(p, password) {
                    Ok(d) => return Ok(d),
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }

    /// After an owner-slot unlock: keep owner and password slots and runtime slots for other
    /// installations, and (re)wrap a runtime slot for this one.
    pub fn with_runtime_slot<R: CryptoRng + ?Sized>(
        &self,
        envelope: EnvelopeName,
        dek: &Dek,
        runtime: &PublicIdentity,
        rng: &mut R,
    ) -> Result<Self> {
        let mut slots: Vec<Slot> = self
            .slots
            .iter()
            .filter(|s| {
                !matches!(s, Slot::Key(k) if k.kind == SlotKind::Runtime && k.recipient_did == runtime.did)
            })
            .cloned()
            .collect();
        slots.push(Slot::Key(create_key_slot(
            envelope,
            dek,
            SlotKind::Runtime,
            runtime,
            rng,
        )?));
        Ok(EnvelopeDescriptor { v: self.v, slots })
    }

    /// Add (or replace) the password slot. Refused for the identity envelope.
    pub fn with_password_slot<R: CryptoRng + ?Sized>(
        &self,
        envelope: EnvelopeName,
        dek: &Dek,
        password: &str,
        params: ScryptParams,
        rng: &mut R,
    ) -> Result<Self> {
        let slot = create_password_slot(envelope, dek, password, params, rng)?;
        let mut slots = self.without_password_slots().slots;
        slots.push(Slot::Password(slot));
        Ok(EnvelopeDescriptor { v: self.v, slots })
    }

    /// The same descriptor minus password slots.
    pub fn without_password_slots(&self) -> Self {
        EnvelopeDescriptor {
            v: self.v,
            slots: self
                .slots
                .iter()
                .filter(|s| !matches!(s, Slot::Password(_)))
                .cloned()
                .collect(),
        }
    }

    /// Recipient adoption: exactly (local owner, local runtime) key slots, no password slots.
    pub fn adopt<R: CryptoRng + ?Sized>(
        envelope: EnvelopeName,
        dek: &Dek,
        owner: &PublicIdentity,
        runtime: &PublicIdentity,
        rng: &mut R,
    ) -> Result<Self> {
        Self::for_recipients(envelope, dek, Some(owner), Some(runtime), rng)
    }
}

fn slot_to_json(s: &Slot) -> Value {
    match s {
        Slot::Key(k) => json!({
            "type": k.kind.as_str(),
            "recipient_did": k.recipient_did,
            "ephemeral_pub": b64(&k.ephemeral_pub),
            "iv": b64(&k.iv),
            "wrapped_dek": b64(&k.wrapped_dek),
        }),
        Slot::Password(p) => json!({
            "type": "password",
            "kdf": p.kdf,
            "kdf_params": {"N": p.params.n, "r": p.params.r, "p": p.params.p},
            "salt": b64(&p.salt),
            "iv": b64(&p.iv),
            "wrapped_dek": b64(&p.wrapped_dek),
        }),
        Slot::Unknown(v) => v.clone(),
    }
}

fn parse_slot(v: &Value) -> Result<Slot> {
    let m: &Map<String, Value> = v
        .as_object()
        .ok_or_else(|| Error::InvalidDescriptor("slot is not an object".into()))?;
    let s = |name: &str| {
        m.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::InvalidDescriptor(format!("slot without string `{name}`")))
    };
    let kind = match m.get("type").and_then(Value::as_str) {
        Some("owner") => SlotKind::Owner,
        Some("runtime") => SlotKind::Runtime,
        Some("password") => {
            let params = m
                .get("kdf_params")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    Error::InvalidDescriptor("password slot without kdf_params".into())
                })?;
            let num = |k: &str| {
                params
                    .get(k)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| Error::InvalidDescriptor(format!("kdf_params.{k} missing")))
            };
            let small = |k: &str| {
                u32::try_from(num(k)?)
                    .map_err(|_| Error::InvalidDescriptor(format!("kdf_params.{k} too large")))
            };
            return Ok(Slot::Password(PasswordSlot {
                kdf: s("kdf")?.to_string(),
                params: ScryptParams {
                    n: num("N")?,
                    r: small("r")?,
                    p: small("p")?,
                },
                salt: b64_decode(s("salt")?, "password slot salt")?,
                iv: b64_array::<12>(s("iv")?, "password slot iv")?,
                wrapped_dek: b64_decode(s("wrapped_dek")?, "password slot wrapped_dek")?,
            }));
        }
        _ => return Ok(Slot::Unknown(v.clone())),
    };
    Ok(Slot::Key(KeySlot {
        kind,
        recipient_did: s("recipient_did")?.to_string(),
        ephemeral_pub: b64_array::<32>(s("ephemeral_pub")?, "key slot ephemeral_pub")?,
        iv: b64_array::<12>(s("iv")?, "key slot iv")?,
        wrapped_dek: b64_decode(s("wrapped_dek")?, "key slot wrapped_dek")?,
    }))
}
