//! The pods' report batches queue for the manager's loop up to a bound in bytes and in age, on
//! a real nats-server: a loop that reads nothing while batches arrive finds the oldest that fit,
//! and the rest counted as shed; once it reads, the queue takes batches again; a batch that
//! waited past the age bound is shed when the loop comes to it.

use leasehold_dc_manager::inbound::BoundedInbound;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_process::clock::LeaseClock;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(10);
const SUBJECT: &str = "lh.pod.bkk.p1.report";

/// Once `n` messages have been queued (read or not), within 10 s.
async fn queued(inbound: &BoundedInbound, n: u64) {
    let mut queued = inbound.queued_watch();
    let all = tokio::time::timeout(WITHIN, queued.wait_for(|&q| q >= n)).await;
    assert!(all.is_ok(), "{n} batches queued within 10 s");
}

async fn next(inbound: &mut BoundedInbound) -> Option<async_nats::Message> {
    tokio::time::timeout(WITHIN, inbound.next()).await.expect("a queued batch within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_past_the_bound_are_shed_and_the_oldest_kept() {
    const BATCH: usize = 10_000;
    const SENT: u64 = 20;
    // Room for three batches (payload, subject and the per-message overhead of 256 bytes).
    let room = 3 * (BATCH + SUBJECT.len() + 256);
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let client = wait::client(&server.url(), "test").await;
        let subscription = client.subscribe("lh.pod.bkk.*.report").await.unwrap();
        let clock = LeaseClock::start();
        let mut inbound = BoundedInbound::new(subscription, room, 60_000_000_000, clock);
        assert_eq!(inbound.last_shed_ns(), None, "{}: nothing dropped yet", server.version);
        let before_ns = clock.now_ns();
        for i in 0..SENT {
            let mut payload = vec![b'x'; BATCH];
            payload[0] = i as u8;
            client.publish(SUBJECT, payload.into()).await.unwrap();
        }
        client.flush().await.unwrap();
        // Nothing is read until every batch has been queued or shed.
        let mut shed = inbound.shed_watch();
        let all_shed = tokio::time::timeout(WITHIN, shed.wait_for(|&n| n >= SENT - 3)).await;
        assert!(all_shed.is_ok(), "{}: {} of {SENT} batches shed", server.version, inbound.shed());
        let shed_at = inbound.last_shed_ns().expect("the time of the latest drop");
        assert!((before_ns..=clock.now_ns()).contains(&shed_at), "{}: dropped at {shed_at}", server.version);
        for i in 0..3u8 {
            let msg = next(&mut inbound).await.expect("a queued batch");
            assert_eq!(msg.payload[0], i, "{}: not the oldest batches kept", server.version);
        }
        // Read, the queue takes the next batch, and nothing else was queued behind the three.
        client.publish(SUBJECT, vec![b'y'; BATCH].into()).await.unwrap();
        let msg = next(&mut inbound).await.expect("the batch sent after reading");
        assert_eq!(msg.payload[0], b'y', "{}: a shed batch was queued", server.version);
        assert_eq!(inbound.shed(), SENT - 3, "{}", server.version);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_older_than_the_age_bound_when_read_is_shed() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let client = wait::client(&server.url(), "test").await;
        let subscription = client.subscribe("lh.pod.bkk.*.report").await.unwrap();
        // An age bound of 1 ns: every batch is older than that by the time the loop reads it
        // (it crosses a queue between two tasks), so the loop reads none and sheds each.
        let clock = LeaseClock::start();
        let mut inbound = BoundedInbound::new(subscription, 1 << 20, 1, clock);
        let mut shed = inbound.shed_watch();
        for batch in ["old", "older"] {
            client.publish(SUBJECT, batch.into()).await.unwrap();
        }
        client.flush().await.unwrap();
        // The oldest is taken off the queue to read its arrival: it is shed all the same.
        queued(&inbound, 1).await;
        assert!(inbound.read_through_ns() <= clock.now_ns(), "{}", server.version);
        let both = tokio::select! {
            msg = inbound.next() => panic!("{}: a batch past the age bound was read: {msg:?}", server.version),
            both = tokio::time::timeout(WITHIN, shed.wait_for(|&n| n >= 2)) => both.is_ok(),
        };
        assert!(both, "{}: {} of 2 batches shed", server.version, inbound.shed());
        let shed_at = inbound.last_shed_ns().expect("the time of the latest drop");
        assert!(shed_at <= clock.now_ns(), "{}: dropped at {shed_at}", server.version);
    }
}

/// The reader has read through the arrival of the oldest batch queued unread (a pod's silence
/// counts only up to then), or through now when none is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_has_read_through_the_arrival_of_the_oldest_batch_unread() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let client = wait::client(&server.url(), "test").await;
        let subscription = client.subscribe("lh.pod.bkk.*.report").await.unwrap();
        let clock = LeaseClock::start();
        let mut inbound = BoundedInbound::new(subscription, 1 << 20, 60_000_000_000, clock);
        let before_ns = clock.now_ns();
        let through_ns = inbound.read_through_ns();
        assert!((before_ns..=clock.now_ns()).contains(&through_ns), "{}: nothing queued: now", server.version);
        let sent_ns = clock.now_ns();
        for batch in ["first", "second"] {
            client.publish(SUBJECT, batch.into()).await.unwrap();
        }
        client.flush().await.unwrap();
        // The queue is filled by a task of its own: once both are there, the read-through time
        // stays at the first one's arrival.
        queued(&inbound, 2).await;
        let first_arrived_ns = inbound.read_through_ns();
        assert!(first_arrived_ns >= sent_ns, "{}: arrived before it was sent", server.version);
        assert_eq!(inbound.read_through_ns(), first_arrived_ns, "{}: the oldest batch's arrival", server.version);
        let first = next(&mut inbound).await.expect("the first batch");
        assert_eq!(&first.payload[..], b"first", "{}: the batch whose arrival was read comes first", server.version);
        let second_ns = inbound.read_through_ns();
        assert!(second_ns >= first_arrived_ns, "{}: read through less after reading", server.version);
        let second = next(&mut inbound).await.expect("the second batch");
        assert_eq!(&second.payload[..], b"second", "{}", server.version);
        let after_ns = clock.now_ns();
        assert!(inbound.read_through_ns() >= after_ns, "{}: both read, nothing queued: now", server.version);
    }
}
