//! One DC of limit "api" (DC "bkk") for in-process tests: a DC manager and a pod agent with short
//! periods, and free loopback addresses for their HTTP listeners.

use leasehold_core::dc_manager::DcManagerConfig;

/// A loopback address nothing listens on now.
pub(crate) fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A DC manager of "api" in "bkk" on `url`, renewing every 200 ms, its HTTP on `http_listen`.
pub(crate) fn dc_manager(url: &str, leader_ttl_ms: u64, http_listen: &str) -> leasehold_dc_manager::settings::Settings {
    let mut m = DcManagerConfig::new("api", "bkk", "");
    m.renew_interval_ms = 200;
    leasehold_dc_manager::settings::Settings {
        nats_url: url.into(),
        leader_ttl_ms,
        report_interval_ms: 100,
        http_listen: Some(http_listen.into()),
        manager: m,
        ..Default::default()
    }
}

/// A pod of "bkk" whose default limit is "api", reporting every 100 ms.
pub(crate) fn pod() -> leasehold_pod::PodSettings {
    leasehold_pod::PodSettings {
        limit: Some("api".into()),
        dc: "bkk".into(),
        report_interval_ms: 100,
        ..Default::default()
    }
}
