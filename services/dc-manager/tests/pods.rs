//! DC manager + pods + coordinator on real nats-servers: pod join/drain/crash re-splits, the
//! lease-expiry fail-safe, DC manager failover, and bad messages counted, never obeyed.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_coordinator::settings::Settings as CoordSettings;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::{DcManagerConfig, PodLeaseBounds, TermRecord};
use leasehold_core::quota::Quota;
use leasehold_dc_manager::manager::Status;
use leasehold_dc_manager::settings::Settings;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_pod::{Denial, Pod, PodSettings, PodStatus};
use std::time::{Duration, Instant};
use tokio::sync::watch;

const WITHIN: Duration = Duration::from_secs(15);

async fn client(url: &str) -> async_nats::Client {
    wait::client(url, "test").await
}

fn coordinator(url: &str) -> CoordSettings {
    let mut limit = LimitConfig::new("api", Quota::per_s(100, 10), &[("bkk", Quota::per_s(10, 0))]);
    limit.renew_interval_ms = 200;
    limit.dc_ttl_ms = 2_000;
    CoordSettings {
        nats_url: url.into(),
        nats_creds_file: None,
        id: Some("coord".into()),
        leader_ttl_ms: 1_000,
        replicas: 1,
        http_listen: None,
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
    }
}

fn manager(url: &str, id: &str) -> Settings {
    let mut m = DcManagerConfig::new("api", "bkk", "");
    m.pod_ttl_ms = 1_000;
    m.renew_interval_ms = 200;
    m.heartbeat_timeout_ms = 400;
    Settings {
        nats_url: url.into(),
        id: Some(id.into()),
        leader_ttl_ms: 1_000,
        report_interval_ms: 100,
        manager: m,
        ..Settings::default()
    }
}

fn pod_settings(url: &str, id: &str) -> PodSettings {
    PodSettings {
        nats_url: url.into(),
        limit: Some("api".into()),
        dc: "bkk".into(),
        pod_id: Some(id.into()),
        report_interval_ms: 100,
        drain_timeout_ms: 3_000,
        ..PodSettings::default()
    }
}

async fn until<T: Clone + std::fmt::Debug>(rx: &mut watch::Receiver<T>, what: &str, f: impl Fn(&T) -> bool) -> T {
    wait::until(rx, WITHIN, what, f).await
}

fn rate(s: &PodStatus) -> f64 {
    s.lease.as_ref().map_or(0.0, |l| l.quota.rate_per_s())
}

/// Waits until both conditions hold at the same moment (each side re-checked on every change).
async fn until_pair(
    a: &mut watch::Receiver<PodStatus>,
    b: &mut watch::Receiver<PodStatus>,
    what: &str,
    f: impl Fn(f64, f64) -> bool,
) {
    let deadline = Instant::now() + WITHIN;
    loop {
        if f(rate(&a.borrow()), rate(&b.borrow())) {
            return;
        }
        let left = deadline.checked_duration_since(Instant::now()).unwrap_or_else(|| {
            panic!("not within {WITHIN:?}: {what}; a {:?} b {:?}", rate(&a.borrow()), rate(&b.borrow()))
        });
        let changed = async {
            tokio::select! {
                _ = a.changed() => {}
                _ = b.changed() => {}
            }
        };
        let _ = tokio::time::timeout(left, changed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_joining_draining_and_crashing_re_split_the_dc_lease() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let url = server.url();
        let _coord = leasehold_coordinator::spawn(client(&url).await, coordinator(&url));
        let mut m = leasehold_dc_manager::spawn(client(&url).await, manager(&url, "m1"));
        until(&mut m.status, "the manager leads", |s: &Status| s.leading).await;
        let a = Pod::start(client(&url).await, &pod_settings(&url, "pod-a"));
        let mut a_rx = a.limiter("api").unwrap().status();
        // Alone, A gets the whole DC budget (floor + DC lease) once the DC lease arrives.
        until(&mut a_rx, "A holds most of the limit", |s| rate(s) >= 90.0).await;
        assert!(rate(&a_rx.borrow()) <= 100.0, "{}: more than the limit", server.version);

        let b = Pod::start(client(&url).await, &pod_settings(&url, "pod-b"));
        let mut b_rx = b.limiter("api").unwrap().status();
        until_pair(&mut a_rx, &mut b_rx, "an equal split", |x, y| {
            x > 40.0 && y > 40.0 && x + y <= 100.0 && (x - y).abs() < 5.0
        })
        .await;

        // Graceful drain: acknowledged, and A grows back to the whole budget.
        assert!(b.drain().await.unwrap(), "{}: drain not acknowledged", server.version);
        until(&mut a_rx, "A takes the drained share", |s| rate(s) >= 90.0).await;

        // A crash: C gets a share, vanishes; A gets everything back once C's lease expired.
        let c = Pod::start(client(&url).await, &pod_settings(&url, "pod-c"));
        let mut c_rx = c.limiter("api").unwrap().status();
        until_pair(&mut a_rx, &mut c_rx, "A and C share", |x, y| x > 40.0 && y > 40.0).await;
        let crashed_at = Instant::now();
        c.crash();
        until(&mut a_rx, "A takes the crashed pod's share", |s| rate(s) >= 90.0).await;
        // Not before C's lease (1 s TTL, stretched by drift and grace) could have run out.
        assert!(crashed_at.elapsed() >= Duration::from_millis(1_000), "{}: reclaimed too early", server.version);
        let dc = m.status.borrow().clone();
        assert!(dc.totals.pod_leases_issued > 5 && dc.totals.returns >= 1, "{}: {dc:?}", server.version);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_cut_off_from_its_manager_stops_admitting_when_its_lease_expires() {
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let _coord = leasehold_coordinator::spawn(client(&url).await, coordinator(&url));
    let m = leasehold_dc_manager::spawn(client(&url).await, manager(&url, "m1"));
    let a = Pod::start(client(&url).await, &pod_settings(&url, "pod-a"));
    let api = a.limiter("api").unwrap();
    let mut a_rx = api.status();
    until(&mut a_rx, "A holds a lease", |s| rate(s) > 0.0).await;
    // A fresh lease starts with an empty bucket: the first permit comes within 1/rate.
    let granted = api.acquire(1, leasehold_pod::Priority::High, Duration::from_secs(2)).await.unwrap();
    assert_eq!(granted, Ok(()), "a pod holding a lease admits");
    m.crash();
    let expires = a_rx.borrow().lease.as_ref().unwrap().expires_at_ns;
    // Fail safe: once the lease runs out (≤ 1 s after it was sent), every request is denied.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match api.try_acquire(1).unwrap() {
            Err(Denial::NoLease) => break,
            _ => assert!(Instant::now() < deadline, "still admitting 5 s after its manager died"),
        }
        tokio::task::yield_now().await;
    }
    assert!(api.now_ns() >= expires, "denied as expired before the lease's end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_manager_takes_over_with_a_higher_epoch() {
    for bin in binaries().expect("a nats-server is needed") {
        let server = NatsServer::start(&bin).unwrap();
        let url = server.url();
        let _coord = leasehold_coordinator::spawn(client(&url).await, coordinator(&url));
        let mut m1 = leasehold_dc_manager::spawn(client(&url).await, manager(&url, "m1"));
        let first = until(&mut m1.status, "m1 leads", |s: &Status| s.leading).await;
        // The DC's leader key carries m1's term record: what bounds its pod leases.
        let js = async_nats::jetstream::new(client(&url).await);
        let leaders = leasehold_nats::kv::open_bucket(&js, leasehold_core::subjects::LEADER_BUCKET).await.unwrap();
        let (_, value) = leasehold_nats::kv::read(&leaders, "dc.bkk").await.unwrap().expect("m1 wrote dc.bkk");
        let own = PodLeaseBounds::of(&manager(&url, "m1").manager);
        assert_eq!(TermRecord::decode(&value, own), ("m1".to_string(), own), "{}", server.version);
        let mut m2 = leasehold_dc_manager::spawn(client(&url).await, manager(&url, "m2"));
        let a = Pod::start(client(&url).await, &pod_settings(&url, "pod-a"));
        let mut a_rx = a.limiter("api").unwrap().status();
        until(&mut a_rx, "a lease from m1", |s| s.lease.as_ref().is_some_and(|l| l.issuer.starts_with("m1-"))).await;
        assert!(!m2.status.borrow().leading, "{}: two leaders", server.version);
        m1.crash();
        let second = until(&mut m2.status, "m2 leads", |s: &Status| s.leading).await;
        assert!(second.epoch > first.epoch, "{}: epoch did not grow", server.version);
        let s = until(&mut a_rx, "a lease from m2", |s| s.lease.as_ref().is_some_and(|l| l.issuer.starts_with("m2-")))
            .await;
        assert!(s.lease.unwrap().version.epoch == second.epoch);
    }
}

/// A report of limit `api` in DC `bkk` from a holder with no lease yet (a join), offering 50
/// calls in 100 ms.
fn first_report(pod: &str, incarnation: u64, seq: u64) -> leasehold_core::wire::PodReport {
    leasehold_core::wire::PodReport {
        v: 1,
        limit: "api".into(),
        dc: "bkk".into(),
        pod: pod.into(),
        incarnation,
        seq,
        interval_ms: 100,
        offered: 50,
        admitted: 0,
        rejected: 0,
        queued: 0,
        errors: 0,
        upstream_429: 0,
        healthy: true,
        draining: false,
        weight: 1.0,
        lease_in_use: None,
        periods: 1,
        held: None,
    }
}

/// A nats-server, a client, a coordinator, and one DC manager that leads.
async fn one_leading_manager(
) -> (NatsServer, async_nats::Client, leasehold_coordinator::Handle, leasehold_dc_manager::Handle) {
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let c = client(&url).await;
    let coord = leasehold_coordinator::spawn(client(&url).await, coordinator(&url));
    let mut m = leasehold_dc_manager::spawn(client(&url).await, manager(&url, "m1"));
    until(&mut m.status, "the manager leads", |s: &Status| s.leading).await;
    (server, c, coord, m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_replayed_messages_are_counted_and_ignored() {
    let (server, c, _coord, mut m) = one_leading_manager().await;
    let url = server.url();
    let mut leases = c.subscribe("lh.pod.bkk.pod-a.lease").await.unwrap();
    c.flush().await.unwrap();
    let a = Pod::start(client(&url).await, &pod_settings(&url, "pod-a"));
    let mut a_rx = a.limiter("api").unwrap().status();
    use futures::StreamExt;
    let first = tokio::time::timeout(WITHIN, leases.next()).await.unwrap().unwrap();
    // Wait for a lease with a rate (the first ones are empty while the floor is unusable).
    let held = until(&mut a_rx, "a lease with a rate", |s| s.leases_applied >= 2 && rate(s) > 0.0).await;
    let held_version = held.lease.as_ref().unwrap().version;

    c.publish("lh.pod.bkk.pod-x.report", "{not json".into()).await.unwrap();
    c.publish("lh.pod.bkk.pod-a.lease", vec![b'x'; 70_000].into()).await.unwrap();
    c.publish("lh.pod.bkk.pod-a.lease", first.payload.clone()).await.unwrap();
    until(&mut m.status, "the bad report is counted", |s: &Status| s.messages_malformed >= 1).await;
    let s = until(&mut a_rx, "bad and replayed leases counted", |s| s.messages_malformed >= 1 && s.leases_refused >= 1)
        .await;
    let now = s.lease.as_ref().expect("still holds a lease");
    assert!(now.version >= held_version && rate(&s) > 0.0, "the replayed old lease replaced a newer one: {now:?}");
}

/// NATS permissions let a pod publish only on its own subjects; the body must not let it speak
/// for another pod (a report for a ghost that takes a share, a return that ends a victim's lease
/// in the manager's books while the victim still spends it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_body_names_another_pod_than_its_subject_is_refused() {
    use futures::StreamExt;
    use leasehold_core::wire::{encode, LeaseReturn, LeaseReturns, PodReports};
    let (_server, c, _coord, mut m) = one_leading_manager().await;
    let mut ghost_leases = c.subscribe("lh.pod.bkk.ghost.lease").await.unwrap();
    let mut ghost_acks = c.subscribe("lh.pod.bkk.ghost.ack").await.unwrap();
    c.flush().await.unwrap();
    let report = |seq| first_report("ghost", 7, seq);
    let give_back = LeaseReturn {
        v: 1,
        limit: "api".into(),
        dc: "bkk".into(),
        holder: "ghost".into(),
        incarnation: 7,
        last_version: None,
    };
    for seq in 1..=10 {
        let batch = PodReports::new("bkk", "ghost", vec![report(seq)]);
        c.publish("lh.pod.bkk.pod-x.report", encode(&batch).into()).await.unwrap();
    }
    let batch = LeaseReturns::new("bkk", "ghost", vec![give_back.clone()]);
    c.publish("lh.pod.bkk.pod-x.return", encode(&batch).into()).await.unwrap();
    // The envelope names the subject's pod but an item names the ghost: refused whole.
    let batch = PodReports::new("bkk", "pod-x", vec![report(11)]);
    c.publish("lh.pod.bkk.pod-x.report", encode(&batch).into()).await.unwrap();
    until(&mut m.status, "the misaddressed messages are counted", |s: &Status| s.messages_malformed >= 12).await;
    // The manager publishes in order after handling each message: had it obeyed a report, the
    // ghost's lease would be on its way before the count above; a round trip flushes it here.
    c.flush().await.unwrap();
    let late = tokio::time::timeout(
        Duration::from_millis(500),
        futures::future::select(ghost_leases.next(), ghost_acks.next()),
    );
    assert!(late.await.is_err(), "the manager answered a pod that only its body named");
}

/// The Rust pod's report batches go through the manager's own reader; a valid batch it leaves
/// (a pod in another language adding a field) is read by serde_json as before, obeyed, and
/// counted, so an operator sees that pod costing more per report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_batch_left_to_serde_is_obeyed_and_counted() {
    use futures::StreamExt;
    use leasehold_core::wire::{encode, PodReports};
    let (server, c, _coord, mut m) = one_leading_manager().await;
    let a = Pod::start(client(&server.url()).await, &pod_settings(&server.url(), "pod-a"));
    let mut a_rx = a.limiter("api").unwrap().status();
    until(&mut a_rx, "pod-a holds a lease with a rate", |s| s.leases_applied >= 2 && rate(s) > 0.0).await;
    assert_eq!(m.status.borrow().report_batches_read_by_serde, 0, "the Rust pod's batches were left to serde");
    let mut x_leases = c.subscribe("lh.pod.bkk.pod-x.lease").await.unwrap();
    c.flush().await.unwrap();
    let report = first_report("pod-x", 9, 1);
    let plain = String::from_utf8(encode(&PodReports::new("bkk", "pod-x", vec![report]))).unwrap();
    let with_a_field = plain.replacen(r#""limit""#, r#""sdk":"py-0.1","limit""#, 1);
    assert_ne!(plain, with_a_field);
    c.publish("lh.pod.bkk.pod-x.report", with_a_field.into()).await.unwrap();
    until(&mut m.status, "the batch is counted", |s: &Status| s.report_batches_read_by_serde == 1).await;
    let lease = tokio::time::timeout(WITHIN, x_leases.next()).await.expect("pod-x joined and got a lease");
    assert!(lease.is_some());
}

/// The number of pods `leasehold_dc_pods_eligible` shows on `addr`'s `/metrics`.
async fn pods_eligible_metric(http: &reqwest::Client, addr: &str) -> Option<f64> {
    let body = http.get(format!("http://{addr}/metrics")).send().await.ok()?.text().await.ok()?;
    body.lines().find(|l| l.starts_with("leasehold_dc_pods_eligible{"))?.rsplit(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eligible_pods_metric_follows_the_split_when_a_pod_crashes() {
    use futures::StreamExt;
    use leasehold_core::wire::{decode, DcReports};
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let c = client(&url).await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let _coord = leasehold_coordinator::spawn(client(&url).await, coordinator(&url));
    let settings = Settings { http_listen: Some(addr.clone()), ..manager(&url, "m1") };
    let mut m = leasehold_dc_manager::spawn(client(&url).await, settings);
    until(&mut m.status, "the manager leads", |s: &Status| s.leading).await;
    let mut reports = c.subscribe("lh.dc.bkk.report").await.unwrap();
    c.flush().await.unwrap();
    let pods: Vec<Pod> = futures::future::join_all(["pod-a", "pod-b", "pod-c"].map(|id| {
        let url = url.clone();
        async move { Pod::start(client(&url).await, &pod_settings(&url, id)) }
    }))
    .await;
    until(&mut m.status, "three pods eligible", |s: &Status| s.totals.pods_eligible == 3).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    assert_eq!(pods_eligible_metric(&http, &addr).await, Some(3.0));

    let mut pods = pods.into_iter();
    pods.next().unwrap().crash();
    // The DC report (what the split uses) drops to two once the heartbeat times out (400 ms).
    let deadline = Instant::now() + WITHIN;
    loop {
        let left = deadline.checked_duration_since(Instant::now()).expect("the DC report never counted 2 pods");
        let msg = tokio::time::timeout(left, reports.next()).await.expect("no DC report").unwrap();
        let batch = decode::<DcReports>(&msg.payload).unwrap();
        if batch.reports.iter().any(|r| r.limit == "api" && r.pods_healthy == 2) {
            break;
        }
    }
    // The metric says the same within a few report intervals, not when the pod is forgotten.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let shown = pods_eligible_metric(&http, &addr).await;
        if shown == Some(2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "leasehold_dc_pods_eligible still {shown:?} while the split uses 2");
        let _ = tokio::time::timeout(Duration::from_millis(100), m.status.changed()).await;
    }
}
