//! A membership source that keeps watching the cluster while it runs.

/// How membership changes are written: as text or as JSON lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct Report {
    /// JSON lines instead of text.
    pub json: bool,
}

/// A membership source that keeps watching after the join (etcd): its
/// failure ends the member.
pub struct Watch {
    lost: tokio::sync::watch::Receiver<Option<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watch {
    /// A watch whose tasks report their failure on `lost`.
    pub fn new(
        lost: tokio::sync::watch::Receiver<Option<String>>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    ) -> Self {
        Watch { lost, tasks }
    }

    /// Resolves with the reason once the source is lost; never otherwise.
    pub async fn lost(&self) -> String {
        let mut lost = self.lost.clone();
        let reason = lost.wait_for(Option::is_some).await.map(|r| r.clone());
        match reason {
            Ok(reason) => reason.unwrap_or_default(),
            // The tasks ended without a word: nothing is lost.
            Err(_) => std::future::pending().await,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
