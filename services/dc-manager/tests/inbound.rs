//! The pods' report batches queue for the manager's loop up to a bound in bytes, on a real
//! nats-server: a loop that reads nothing while batches arrive finds the oldest that fit, and
//! the rest counted as shed; once it reads, the queue takes batches again.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_dc_manager::inbound::BoundedInbound;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_past_the_bound_are_shed_and_the_oldest_kept() {
    const BATCH: usize = 10_000;
    const SENT: u64 = 20;
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let client = wait::client(&server.url(), "test").await;
        let subscription = client.subscribe("lh.pod.bkk.*.report").await.unwrap();
        // Room for three batches.
        let mut inbound = BoundedInbound::new(subscription, 3 * BATCH);
        for i in 0..SENT {
            let mut payload = vec![b'x'; BATCH];
            payload[0] = i as u8;
            client.publish("lh.pod.bkk.p1.report", payload.into()).await.unwrap();
        }
        client.flush().await.unwrap();
        // Nothing is read until every batch has been queued or shed.
        let deadline = Instant::now() + Duration::from_secs(10);
        while inbound.shed() < SENT - 3 {
            assert!(Instant::now() < deadline, "{}: {} of {SENT} batches shed", server.version, inbound.shed());
            tokio::task::yield_now().await;
        }
        for i in 0..3u8 {
            let msg = inbound.next().await.expect("a queued batch");
            assert_eq!(msg.payload[0], i, "{}: not the oldest batches kept", server.version);
        }
        // Read, the queue takes the next batch, and nothing else was queued behind the three.
        client.publish("lh.pod.bkk.p1.report", vec![b'y'; BATCH].into()).await.unwrap();
        let msg = inbound.next().await.expect("the batch sent after reading");
        assert_eq!(msg.payload[0], b'y', "{}: a shed batch was queued", server.version);
        assert_eq!(inbound.shed(), SENT - 3, "{}", server.version);
    }
}
