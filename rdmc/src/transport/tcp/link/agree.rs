//! The key agreement that starts a link: both ends swap their modes and
//! fresh nonces, and derive the frame keys of each direction.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::LinkSecurity;
use crate::ids::NodeId;
use crate::transport::crypto;
use crate::transport::frame::protect::{Opener, Sealer, WireKeys, WireSecurity};

/// Why the key agreement with a peer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AgreeError {
    /// The two ends protect their frames differently: a configuration
    /// error, not a failure of the peer.
    #[error(
        "wire security mismatch: this node uses {}, the peer {}",
        local.name(),
        remote.map_or("an unknown mode", WireSecurity::name)
    )]
    Mismatch {
        /// This node's mode.
        local: WireSecurity,
        /// The peer's, if this build knows it.
        remote: Option<WireSecurity>,
    },
    /// Anything else: the connection failed or went silent, or the peer
    /// speaks another frame protocol.
    #[error("{0}")]
    Failed(String),
}

/// Opens the key agreement message.
pub(super) const AGREE_MAGIC: [u8; 8] = *b"RDMC-WK1";
/// Size of the key agreement message: magic, mode, nonce.
pub(super) const AGREE_LEN: usize = 8 + 1 + 32;

/// Agree on the frame keys with `peer`: each end sends its mode and a fresh
/// nonce, and both derive the per-direction keys from the cluster key and
/// the two nonces ([`WireKeys::derive`]). Nothing here needs protecting: a
/// changed nonce only makes the keys differ (and the first frame fail), a
/// changed mode is a mismatch, and without the cluster key nobody can
/// derive the keys.
pub(super) async fn agree<R, W>(
    reader: &mut R,
    writer: &mut W,
    security: &LinkSecurity,
    peer: NodeId,
) -> Result<(Sealer, Opener), AgreeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut ours = [0u8; AGREE_LEN];
    ours[..8].copy_from_slice(&AGREE_MAGIC);
    ours[8] = security.mode.code();
    ours[9..].copy_from_slice(&crypto::random::<32>());
    let mut theirs = [0u8; AGREE_LEN];
    let send = async {
        writer.write_all(&ours).await?;
        writer.flush().await
    };
    let (sent, received) = tokio::join!(send, reader.read_exact(&mut theirs));
    sent.and(received.map(drop))
        .map_err(|e| AgreeError::Failed(format!("key agreement: {e}")))?;
    if theirs[..8] != AGREE_MAGIC {
        return Err(AgreeError::Failed(
            "key agreement: the peer speaks another frame protocol".to_owned(),
        ));
    }
    let mode = security.mode;
    match WireSecurity::from_code(theirs[8]) {
        Some(m) if m == mode => {}
        remote => {
            return Err(AgreeError::Mismatch {
                local: mode,
                remote,
            });
        }
    }
    let nonce = |m: &[u8; AGREE_LEN]| -> [u8; 32] { m[9..].try_into().expect("32 bytes") };
    let keys = WireKeys::derive(
        security.key.secret(),
        mode,
        security.me.0,
        peer.0,
        &nonce(&ours),
        &nonce(&theirs),
    );
    Ok((Sealer::new(mode, &keys.send), Opener::new(mode, &keys.recv)))
}
