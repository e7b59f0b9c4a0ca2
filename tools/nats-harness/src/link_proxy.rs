//! A network link under a test's control: a TCP proxy that forwards each connection to the
//! first of its targets that answers (failing over between them), and that can be cut (every
//! connection dropped, new ones refused) and healed. The chaos harness puts one between each DC
//! and the cluster; the partition test puts one on each DC's leaf-node link to the hub.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct LinkProxy {
    port: u16,
    cut: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl LinkProxy {
    /// Listen on a free loopback port and forward to `targets` (loopback ports).
    pub async fn start(targets: Vec<u16>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (c, l) = (cut.clone(), links.clone());
        let accept = tokio::spawn(async move {
            let mut next = 0usize;
            while let Ok((mut inbound, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the link is cut
                }
                let targets = targets.clone();
                next += 1;
                let start = next;
                let task = tokio::spawn(async move {
                    for k in 0..targets.len() {
                        let port = targets[(start + k) % targets.len()];
                        if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
                let mut links = l.lock().unwrap_or_else(|p| p.into_inner());
                links.retain(|t| !t.is_finished());
                links.push(task);
            }
        });
        Ok(LinkProxy { port, cut, links, accept })
    }

    /// The port to connect to instead of the targets.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Drop every connection and refuse new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for t in self.links.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            t.abort();
        }
    }

    /// Accept connections again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
