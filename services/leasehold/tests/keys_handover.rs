//! A planned hand-over (SIGTERM) is invisible to callers: under steady load across three
//! instances, the stopping one says it is draining on `/healthz`, keeps answering (forwarding to
//! the shards' new owners) while a load balancer takes it out of rotation, and only then closes
//! its listener; the survivors never answer 503 while its shards move.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::keys_instances::*;

/// What the callers saw.
#[derive(Default)]
struct Seen {
    /// 200 and 429 answers, watched by the test to know the load got through.
    answered: tokio::sync::watch::Sender<u64>,
    unavailable: AtomicU64,
    other_status: AtomicU64,
    /// Connection refused: the stopped instance's port, before the balancer noticed. Nothing was
    /// sent, so a balancer retries these elsewhere.
    refused: AtomicU64,
    /// A request sent and lost (a reset keep-alive connection, a timeout).
    lost: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
}

impl Seen {
    /// Wait (at most `within`) until `more` answers came after this call.
    async fn answers(&self, more: u64, within: Duration, what: &str) {
        let target = *self.answered.borrow() + more;
        let mut answered = self.answered.subscribe();
        let reached = tokio::time::timeout(within, answered.wait_for(|n| *n >= target)).await;
        assert!(reached.is_ok(), "{what}: {} answers, waited for {target}", *self.answered.borrow());
    }

    fn note(&self, outcome: Result<u16, reqwest::Error>) {
        match outcome {
            Ok(200 | 429) => {
                self.answered.send_modify(|n| *n += 1);
                return;
            }
            Ok(503) => &self.unavailable,
            Ok(_) => &self.other_status,
            Err(e) if e.is_connect() => &self.refused,
            Err(e) => {
                *self.last_error.lock().unwrap() = Some(format!("{e:?}"));
                &self.lost
            }
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

/// Like a load balancer's health check: take `i` out of rotation once `/healthz` is not 200.
async fn watch_health(i_base: String, out_of_rotation: Arc<AtomicBool>) {
    let http = client();
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    loop {
        poll.tick().await;
        let healthy = http.get(format!("{i_base}/healthz")).send().await.is_ok_and(|r| r.status().is_success());
        if !healthy {
            out_of_rotation.store(true, Ordering::Relaxed);
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_hand_over_under_load_loses_no_request() {
    let server = nats();
    let tiers = tiers_file(10_000);
    let http = client();
    let a = start(&server.url(), "a", &tiers, "interval:50");
    let mut b = start(&server.url(), "b", &tiers, "interval:50");
    let c = start(&server.url(), "c", &tiers, "interval:50");
    wait_balanced(&http, &[&a, &b, &c], Duration::from_secs(20)).await;

    let seen = Arc::new(Seen::default());
    let b_out = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn(watch_health(b.base.clone(), b_out.clone()));
    let mut callers = Vec::new();
    for caller in 0..6u64 {
        let (seen, b_out, stop) = (seen.clone(), b_out.clone(), stop.clone());
        let bases = [a.base.clone(), b.base.clone(), c.base.clone()];
        callers.push(tokio::spawn(async move {
            let http = client();
            let mut n = caller;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let mut target = (n % 3) as usize;
                if target == 1 && b_out.load(Ordering::Relaxed) {
                    target = 0;
                }
                let url = format!("{}/v1/keys/user-{}", bases[target], n % 500);
                seen.note(http.post(url).send().await.map(|r| r.status().as_u16()));
            }
        }));
    }
    seen.answers(500, Duration::from_secs(10), "no load got through").await;

    sigterm(&b);
    // The callers go on on the other worker meanwhile.
    let status = tokio::task::block_in_place(|| wait_exit(&mut b.child, Duration::from_secs(20)));
    assert!(status.success(), "b exited with {status}");
    wait_balanced(&http, &[&a, &c], Duration::from_secs(10)).await;
    seen.answers(500, Duration::from_secs(10), "the survivors stopped answering").await;
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.unwrap();
    }

    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let summary = format!(
        "answered {}, 503 {}, other status {}, refused {}, lost {} (last: {:?})",
        *seen.answered.borrow(),
        count(&seen.unavailable),
        count(&seen.other_status),
        count(&seen.refused),
        count(&seen.lost),
        seen.last_error.lock().unwrap()
    );
    eprintln!("{summary}");
    assert!(b_out.load(Ordering::Relaxed), "the balancer never saw b leave: {summary}");
    assert_eq!((count(&seen.unavailable), count(&seen.other_status), count(&seen.lost)), (0, 0, 0), "{summary}");
    assert_eq!(count(&seen.refused), 0, "b closed its port before saying it was draining: {summary}");
}
