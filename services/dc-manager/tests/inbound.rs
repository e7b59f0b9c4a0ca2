//! The pods' report batches queue for the manager's loop up to a bound in bytes and in age, on
//! a real nats-server: a loop that reads nothing while batches arrive finds the oldest that fit,
//! and the rest counted as shed; once it reads, the queue takes batches again; a batch that
//! waited past the age bound is shed when the loop comes to it.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_dc_manager::inbound::BoundedInbound;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_process::clock::LeaseClock;
use std::time::{Duration, Instant};

const WITHIN: Duration = Duration::from_secs(10);
const SUBJECT: &str = "lh.pod.bkk.p1.report";

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
        let mut inbound = BoundedInbound::new(subscription, room, 60_000_000_000, LeaseClock::start());
        for i in 0..SENT {
            let mut payload = vec![b'x'; BATCH];
            payload[0] = i as u8;
            client.publish(SUBJECT, payload.into()).await.unwrap();
        }
        client.flush().await.unwrap();
        // Nothing is read until every batch has been queued or shed.
        let deadline = Instant::now() + WITHIN;
        while inbound.shed() < SENT - 3 {
            assert!(Instant::now() < deadline, "{}: {} of {SENT} batches shed", server.version, inbound.shed());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
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
        let max_age = Duration::from_millis(200);
        let mut inbound = BoundedInbound::new(subscription, 1 << 20, max_age.as_nanos() as u64, LeaseClock::start());
        client.publish(SUBJECT, "old".into()).await.unwrap();
        client.flush().await.unwrap();
        let sent_at = Instant::now();
        // The loop comes to the queue only after the bound (the sleep is the test's condition,
        // not a wait for something to happen).
        tokio::time::sleep(2 * max_age).await;
        client.publish(SUBJECT, "new".into()).await.unwrap();
        let msg = next(&mut inbound).await.expect("the new batch");
        assert!(sent_at.elapsed() >= 2 * max_age);
        assert_eq!(&msg.payload[..], b"new", "{}: a batch past the age bound was read", server.version);
        assert_eq!(inbound.shed(), 1, "{}", server.version);
    }
}
