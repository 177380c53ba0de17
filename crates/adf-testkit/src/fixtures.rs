//! What the reference runtime's identity fixtures (`testdata/reference-v0.4.2`) are known to
//! hold, shared by every crate whose tests open them.

/// The BIP-39 test mnemonic the fixtures' owner keys derive from.
pub const TEST_MNEMONIC: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
/// The owner DID of `studio-identity.adf`.
pub const STUDIO_OWNER_DID: &str = "did:key:z6Mkg8Z7cTsSo5m83tXmY93GiVPBFR2fePK84cdj2nC7AjoU";
/// The agent DID of `studio-identity.adf`.
pub const STUDIO_DID: &str = "did:key:z6MktLg6r34FahyHfjyQsW9QWJqccDDKhucyQrJGbJqiBVGe";
/// The agent DID of the minimal fixture.
pub const MINIMAL_DID: &str = "did:key:z6MktBqvVtR8pFeAnweZr4BSH3Gs66CZsvH6LpdPgD2Kai7s";
/// The provider key sealed in `studio-identity.adf`'s credentials.
pub const STUDIO_PROVIDER_KEY: &str = "sk-golden-test-key-not-real";
