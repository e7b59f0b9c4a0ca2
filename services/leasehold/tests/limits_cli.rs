//! `leasehold limits` as an operator runs it, against a real nats-server of every supported
//! version: put from a file and from flags, get, ls, rm; a dry run and a bad definition write
//! nothing; a document written straight into KV (as with `nats kv put`) is read back.

use bytes::Bytes;
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, CasOutcome};
use leasehold_nats::limits_store;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::process::{Command, Output};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/limits/partner-api.toml");

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn limits(url: &str, args: &[&str]) -> Run {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("limits")
        .args(args)
        .env("LEASEHOLD_NATS_URL", url)
        .output()
        .expect("binary runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The revision `ls` shows for `name` (None: not listed).
fn listed_revision(url: &str, name: &str) -> Option<u64> {
    let ls = limits(url, &["ls"]);
    assert_eq!(ls.code, Some(0), "{}", ls.stderr);
    ls.stdout.lines().find(|l| l.split_whitespace().next() == Some(name))?.split_whitespace().last()?.parse().ok()
}

fn temp_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("lh-limits-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_ls_rm_against_every_server() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).expect("server starts");
        let (who, url) = (server.version.clone(), server.url());
        eprintln!("limits CLI against {who}");

        // A dry run of a new limit shows it and writes nothing.
        let dry = limits(&url, &["put", EXAMPLE, "--dry-run"]);
        assert_eq!(dry.code, Some(0), "{who}: {}", dry.stderr);
        assert!(
            dry.stdout
                .contains("added: rate 966/s, burst 20, DCs bkk (floor 50/s burst 4), europe (floor 50/s burst 4)"),
            "{}",
            dry.stdout
        );
        assert_eq!(listed_revision(&url, "partner-api"), None, "{who}: a dry run wrote");

        // From the file.
        let put = limits(&url, &["put", EXAMPLE]);
        assert_eq!(put.code, Some(0), "{who}: {}", put.stderr);
        let r1 = listed_revision(&url, "partner-api").expect("listed");
        assert!(put.stdout.contains(&format!("partner-api: written revision {r1}")), "{}", put.stdout);
        let get = limits(&url, &["get", "partner-api"]);
        assert_eq!(get.code, Some(0), "{who}: {}", get.stderr);
        assert!(get.stdout.contains("rate = \"966/s\"") && get.stdout.contains("floor = \"50/s\""), "{}", get.stdout);
        // Putting the same file again changes nothing.
        let again = limits(&url, &["put", EXAMPLE]);
        assert!(again.stdout.contains(&format!("unchanged (revision {r1})")), "{}", again.stdout);

        // From flags: unspecified fields keep their stored values; the dry run shows the change.
        let flags = ["put", "partner-api", "--rate", "36000/min", "--floor", "bkk=20/s"];
        let dry = limits(&url, &[&flags[..], &["--dry-run"]].concat());
        assert_eq!(dry.code, Some(0), "{}", dry.stderr);
        assert!(
            dry.stdout.contains("rate: 966/s → 600/s (lowers R: new DC leases fit 600/s at once"),
            "{}",
            dry.stdout
        );
        assert!(dry.stdout.contains("10.344 s") && dry.stdout.contains("dcs.bkk.floor: 50/s → 20/s"), "{}", dry.stdout);
        assert_eq!(listed_revision(&url, "partner-api"), Some(r1), "{who}: a dry run wrote");
        let put = limits(&url, &flags);
        assert_eq!(put.code, Some(0), "{}", put.stderr);
        let r2 = listed_revision(&url, "partner-api").unwrap();
        assert!(r2 > r1);
        let json = limits(&url, &["get", "partner-api", "--json"]);
        let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("get --json prints JSON");
        assert_eq!(doc["rate"], "36000/min", "the author's text is kept");
        assert_eq!(doc["burst"], 20, "kept from the stored definition");
        assert_eq!(doc["dcs"][1]["floor"], "50/s");
        assert_eq!(doc["expiry"]["egress_spread_ms"], 144);
        let ls = limits(&url, &["ls"]);
        assert!(ls.stdout.contains("partner-api  600/s  20     bkk=20/s burst 4 europe=50/s burst 4"), "{}", ls.stdout);
        // The pod rules from flags: named in the dry run.
        let rules = ["put", "partner-api", "--split", "demand", "--fail-mode", "best-effort", "--emergency", "bkk=5/s"];
        let dry = limits(&url, &[&rules[..], &["--dry-run"]].concat());
        assert_eq!(dry.code, Some(0), "{}", dry.stderr);
        for line in [
            "split: the DC managers' own → demand",
            "fail_mode: the DC managers' own → best-effort",
            "dcs.bkk.emergency: none → 5/s",
        ] {
            assert!(dry.stdout.contains(line), "{line}: {}", dry.stdout);
        }

        // Bad input: one line naming the limit and the cause, exit 2, nothing written.
        let bad_file = temp_file("bad.toml", &std::fs::read_to_string(EXAMPLE).unwrap().replace("966/s", "90/s"));
        for (args, cause) in [
            (vec!["put", "partner-api", "--rate", "50/s"], "limit partner-api: the DCs' floors (70/s burst 8) exceed"),
            (vec!["put", "partner-api", "--rate", "5/fortnight"], "unknown period"),
            (vec!["put", "partner-api", "--floor", "bkk"], "not DC=RATE"),
            (vec!["put", "partner-api", "--split", "fair"], "--split: \"fair\" is not one of equal, weighted, demand"),
            (vec!["put", "partner-api", "--emergency", "bkk=5/s"], "goes with fail_mode = \"best-effort\""),
            (vec!["put", "partner-api", "--fail-mode", "best-effort", "--emergency", "mars=5/s"], "no DC mars"),
            (vec!["put", "new-one", "--rate", "5/s"], "limit new-one: is new, so --burst is needed"),
            (
                vec!["put", &bad_file],
                "limit partner-api: the DCs' floors (100/s burst 8) exceed the limit (90/s burst 20)",
            ),
        ] {
            let run = limits(&url, &args);
            assert_eq!(run.code, Some(2), "{who} {args:?}: {}", run.stderr);
            assert_eq!(run.stderr.trim().lines().count(), 1, "{args:?}: {}", run.stderr);
            assert!(run.stderr.contains(cause), "{args:?}: {}", run.stderr);
        }
        assert_eq!(listed_revision(&url, "partner-api"), Some(r2), "{who}: a bad definition was written");
        assert_eq!(listed_revision(&url, "new-one"), None);

        // Written straight into KV as JSON (what `nats kv put` does), read back by get and ls.
        let js = jetstream(wait::client(&url, "limits-cli-test").await);
        let store = limits_store::open(&js, 1).await.unwrap();
        let by_hand =
            br#"{"limit":"by-hand","quota":{"rate_milli_per_s":16666,"burst_milli":500},"dcs":[{"name":"eu"}]}"#;
        let written = compare_and_set(&store, "by-hand", Bytes::from_static(by_hand), None).await.unwrap();
        assert!(matches!(written, CasOutcome::Written { .. }), "{who}: {written:?}");
        let get = limits(&url, &["get", "by-hand"]);
        assert_eq!(get.code, Some(0), "{}", get.stderr);
        assert!(get.stdout.contains("rate 16.666/s, burst 0.5, floors eu=0/s (exact)"), "{}", get.stdout);
        assert!(
            limits(&url, &["ls"]).stdout.contains("by-hand      16.666/s  0.5"),
            "{}",
            limits(&url, &["ls"]).stdout
        );
        compare_and_set(&store, "garbage", Bytes::from_static(b"not json"), None).await.unwrap();
        let ls = limits(&url, &["ls"]);
        assert!(ls.stdout.lines().any(|l| l.starts_with("garbage") && l.contains("unreadable")), "{}", ls.stdout);

        // rm: the dry run removes nothing; then the definition is gone.
        let dry = limits(&url, &["rm", "partner-api", "--dry-run"]);
        assert!(dry.stdout.contains("removed (its leases are revoked"), "{}", dry.stdout);
        assert_eq!(listed_revision(&url, "partner-api"), Some(r2), "{who}: a dry run removed");
        let rm = limits(&url, &["rm", "partner-api"]);
        assert_eq!(rm.code, Some(0), "{}", rm.stderr);
        assert_eq!(listed_revision(&url, "partner-api"), None, "{who}");
        let gone = limits(&url, &["get", "partner-api"]);
        assert_eq!(gone.code, Some(1));
        assert!(gone.stderr.contains("no limit named partner-api"), "{}", gone.stderr);
    }
}

#[test]
fn credentials_in_the_url_are_never_printed() {
    let run = limits("nats://ops:s3cret@127.0.0.1:1", &["ls"]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("cannot connect") && !run.stderr.contains("s3cret"), "{}", run.stderr);
    // A bad definition is refused before any connection is tried.
    let run = limits("nats://127.0.0.1:1", &["put", "a.b", "--rate", "1/s", "--burst", "1"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
}
