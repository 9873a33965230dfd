//! The hashes, MACs and random bytes of the handshakes and key agreements,
//! all from aws-lc-rs, the crypto the frames ([`frame::protect`]) and
//! rustls already use: HMAC-SHA256 (proofs, session and derived keys,
//! formation tags), SHA-256 (the cluster digest) and its CSPRNG (nonces,
//! tokens). One crypto stack for the library; the end-to-end message
//! digest (BLAKE3) is a checksum on the data path, kept for its speed.
//!
//! [`frame::protect`]: super::frame::protect

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::error::Unspecified;
use aws_lc_rs::{digest, hmac, rand};

/// Size of a SHA-256 digest and of an HMAC-SHA256 tag, in bytes.
pub(crate) const SHA256_LEN: usize = 32;

/// HMAC-SHA256 over a message fed in parts.
pub(crate) struct HmacSha256(hmac::Context);

impl HmacSha256 {
    /// A MAC keyed with `key` (HMAC takes keys of any length).
    pub(crate) fn new(key: &[u8]) -> Self {
        HmacSha256(hmac::Context::with_key(&hmac::Key::new(
            hmac::HMAC_SHA256,
            key,
        )))
    }

    /// Feeds `data` to the MAC.
    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// Feeds `data` to the MAC, and returns it.
    pub(crate) fn chain_update(mut self, data: impl AsRef<[u8]>) -> Self {
        self.update(data.as_ref());
        self
    }

    /// The tag of everything fed.
    pub(crate) fn finalize(self) -> [u8; SHA256_LEN] {
        self.0.sign().as_ref().try_into().expect("32 bytes")
    }

    /// Whether `tag` is the tag of everything fed, compared in constant time
    /// (as `aws_lc_rs::hmac::verify` does for a message in one piece).
    pub(crate) fn verify_slice(self, tag: &[u8]) -> Result<(), Unspecified> {
        verify_slices_are_equal(self.0.sign().as_ref(), tag)
    }
}

/// SHA-256 over a message fed in parts.
pub(crate) struct Sha256(digest::Context);

impl Sha256 {
    /// An empty hash.
    pub(crate) fn new() -> Self {
        Sha256(digest::Context::new(&digest::SHA256))
    }

    /// Feeds `data` to the hash.
    pub(crate) fn update(&mut self, data: impl AsRef<[u8]>) {
        self.0.update(data.as_ref());
    }

    /// The digest of everything fed.
    pub(crate) fn finalize(self) -> [u8; SHA256_LEN] {
        self.0.finish().as_ref().try_into().expect("32 bytes")
    }
}

/// `N` fresh bytes from the CSPRNG (AWS-LC's, seeded by the operating
/// system). Panics if it fails, as the operating system's random source
/// failing leaves nothing to fall back on.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    rand::fill(&mut bytes).expect("the random number generator failed");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// RFC 4231, test case 2 (a key shorter than the block), fed in parts.
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        const TAG: &str = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let mac = || HmacSha256::new(b"Jefe").chain_update("what do ya want ");
        assert_eq!(hex(&mac().chain_update(b"for nothing?").finalize()), TAG);
        let tag = mac().chain_update(b"for nothing?").finalize();
        assert!(
            mac()
                .chain_update(b"for nothing?")
                .verify_slice(&tag)
                .is_ok()
        );
        let mut wrong = tag;
        wrong[31] ^= 1;
        assert!(
            mac()
                .chain_update(b"for nothing?")
                .verify_slice(&wrong)
                .is_err()
        );
        assert!(
            mac()
                .chain_update(b"for nothing!")
                .verify_slice(&tag)
                .is_err()
        );
        assert!(
            mac()
                .chain_update(b"for nothing?")
                .verify_slice(&tag[..31])
                .is_err()
        );
    }

    /// FIPS 180-2, appendix B.1 ("abc"), and the empty message.
    #[test]
    fn sha256_matches_fips_180() {
        let mut hash = Sha256::new();
        hash.update(b"a");
        hash.update("bc");
        assert_eq!(
            hex(&hash.finalize()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(&Sha256::new().finalize()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn random_bytes_differ() {
        let (a, b) = (random::<32>(), random::<32>());
        assert_ne!(a, b);
        assert_ne!(a, [0; 32]);
    }
}
