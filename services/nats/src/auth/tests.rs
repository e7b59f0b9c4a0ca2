use super::*;
use data_encoding::BASE64URL_NOPAD;

const ROLES: &str = r#"
[roles.coordinator]
publish = ["$KV.lh_ledger.>"]
subscribe = ["lh.dc.*.report"]

[roles.pod]
per_dc = true
one_user = false
publish = ["lh.pod.{dc}.{{name()}}.report"]
subscribe = ["lh.pod.{dc}.{{name()}}.lease"]

[roles.keys]
allow_responses = true
publish = ["lh.keys.check.*"]
subscribe = ["lh.keys.check.*"]

[roles.leaf]
per_dc = true
connection_types = ["LEAFNODE"]
publish = [">"]
subscribe = [">"]
"#;

fn dcs() -> Vec<String> {
    vec!["bkk".into(), "europe".into()]
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-auth-unit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The claims of a JWT, after checking its signature with `signer`'s public key.
fn verified_claims(token: &str, signer: &str) -> serde_json::Value {
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let key = KeyPair::from_public_key(signer).unwrap();
    key.verify(signed.as_bytes(), &BASE64URL_NOPAD.decode(signature.as_bytes()).unwrap()).expect("signed by signer");
    let payload = signed.split('.').nth(1).unwrap();
    serde_json::from_slice(&BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap()
}

#[test]
fn per_dc_roles_get_their_dc_and_keep_the_server_s_name_template() {
    let roles = roles(ROLES, &dcs()).unwrap();
    let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["coordinator", "keys", "leaf-bkk", "leaf-europe", "pod-bkk", "pod-europe"]);
    let pod = roles.iter().find(|r| r.name == "pod-europe").unwrap();
    assert!(!pod.one_user);
    assert_eq!(pod.template.publish.allow, ["lh.pod.europe.{{name()}}.report"]);
    assert_eq!(pod.template.subscribe.allow, ["lh.pod.europe.{{name()}}.lease"]);
    let keys = roles.iter().find(|r| r.name == "keys").unwrap();
    assert_eq!(keys.template.resp, Some(Responses { max: 1, ttl: 0 }));
}

#[test]
fn a_bad_roles_file_or_name_is_refused() {
    let refused = |toml: &str, says: &str| {
        let e = roles(toml, &dcs()).unwrap_err().to_string();
        assert!(e.contains(says), "{toml}: {e}");
    };
    refused("[roles.x]\npublish = [\"lh.pod.{dc}.a\"]\nsubscribe = [\"a\"]\n", "per_dc");
    refused("[roles.x]\npublsh = [\"a\"]\nsubscribe = [\"a\"]\n", "publsh");
    // NATS reads a missing or empty list as "allow everything".
    refused("[roles.x]\nsubscribe = [\"a\"]\n", "publish");
    refused("[roles.x]\npublish = []\nsubscribe = [\"a\"]\n", "at least one subject");
    refused("[roles.x]\npublish = [\"a\"]\nsubscribe = [\"a\"]\nconnection_types = [\"LEAF\"]\n", "LEAF");
    // Two templates under one key name: the server would keep one.
    refused("[roles.a-bkk]\npublish = [\"a\"]\nsubscribe = [\"a\"]\n[roles.a]\nper_dc = true\npublish = [\"a\"]\nsubscribe = [\"a\"]\n", "twice");
    assert!(roles(ROLES, &["bkk".into(), "bkk".into()]).unwrap_err().to_string().contains("twice"));
    assert!(matches!(roles(ROLES, &["b.k".into()]), Err(AuthError::BadName(_))));
    for bad in ["", "a.b", "a*", ">", "a b", &"x".repeat(65)] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
    check_name("bkk-pod_7").unwrap();
}

#[test]
fn setup_keeps_its_keys_and_signs_the_roles_as_scoped_keys_of_the_account() {
    let dir = scratch("setup");
    let first = setup(&dir, ROLES, &dcs(), 100).unwrap();
    let again = setup(&dir, ROLES, &dcs(), 200).unwrap();
    assert_eq!(first.account_public_key, again.account_public_key, "a second run keeps the keys");
    assert_eq!(again.issued_roles, ["pod-bkk", "pod-europe"]);
    let standing: Vec<String> = again.creds.iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
    assert_eq!(standing, ["coordinator.creds", "keys.creds", "leaf-bkk.creds", "leaf-europe.creds"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    std::fs::set_permissions(dir.join("keys"), std::fs::Permissions::from_mode(0o755)).unwrap();
    setup(&dir, ROLES, &dcs(), 300).unwrap();
    assert_eq!((mode(&dir.join("keys")), mode(&dir.join("creds"))), (0o700, 0o700), "made private again");
    assert_eq!(mode(&dir.join("keys/operator.nk")), 0o600);
    assert_eq!(mode(&dir.join("creds/coordinator.creds")), 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("creds")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(leftovers.len(), 4, "no temporary file left: {leftovers:?}");

    let operator = KeyPair::from_seed(std::fs::read_to_string(dir.join("keys/operator.nk")).unwrap().trim()).unwrap();
    let resolver = std::fs::read_to_string(&again.resolver_conf).unwrap();
    let account_jwt = resolver
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{}: \"", again.account_public_key)))
        .and_then(|l| l.strip_suffix('"'))
        .expect("the account in resolver_preload");
    let account = verified_claims(account_jwt, &operator.public_key());
    assert_eq!(account["sub"], again.account_public_key.as_str());
    assert_eq!(account["nats"]["limits"]["disk_storage"], -1, "JetStream on");
    let keys = account["nats"]["signing_keys"].as_array().unwrap();
    let pod = keys.iter().find(|k| k["role"] == "pod-bkk").expect("pod-bkk's key");
    assert_eq!(pod["kind"], "user_scope");
    assert_eq!(pod["template"]["pub"]["allow"][0], "lh.pod.bkk.{{name()}}.report");
    assert!(keys.iter().all(|k| k["role"] != "leaf-bkk"), "a leaf user is the account's, not a scoped key's");
    // The leaf link's user: signed by the account, limited to leaf-node connections.
    let leaf = std::fs::read_to_string(dir.join("creds/leaf-bkk.creds")).unwrap();
    let leaf = verified_claims(leaf.lines().nth(1).unwrap(), &again.account_public_key);
    assert_eq!(leaf["nats"]["allowed_connection_types"][0], "LEAFNODE");
    assert_eq!(leaf["nats"]["pub"]["allow"][0], ">");
    let leaf_account = std::fs::read_to_string(dir.join("leaf-account.conf")).unwrap();
    let bound = format!("{ACCOUNT_VARIABLE}: \"{}\"", again.account_public_key);
    assert!(leaf_account.contains(&bound), "{leaf_account}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pod_s_credential_carries_only_its_name_signed_by_its_dc_s_pod_key() {
    let dir = scratch("issue");
    let report = setup(&dir, ROLES, &dcs(), 100).unwrap();
    let creds = issue(&dir, "pod-bkk", "bkk-pod7", 300).unwrap();
    let whose = read_creds(&creds).unwrap();
    assert_eq!((whose.name.as_str(), whose.role.as_deref(), whose.issued_at_s), ("bkk-pod7", Some("pod-bkk"), 300));
    assert!(whose.public_key.starts_with('U'), "{whose:?}");
    let token = creds.lines().nth(1).unwrap();
    let role_key = KeyPair::from_seed(std::fs::read_to_string(dir.join("keys/role-pod-bkk.nk")).unwrap().trim());
    let user = verified_claims(token, &role_key.unwrap().public_key());
    assert_eq!(user["nats"]["issuer_account"], report.account_public_key.as_str());
    assert!(user["nats"].get("pub").is_none() && user["nats"].get("sub").is_none(), "{user}: no own permissions");
    assert!(creds.contains("-----BEGIN USER NKEY SEED-----\nSU"), "the user's seed");

    assert!(matches!(issue(&dir, "coordinator", "x", 0), Err(AuthError::StandingRole(_))));
    let unknown = issue(&dir, "pod-tokyo", "x", 0).unwrap_err().to_string();
    assert!(unknown.contains("pod-bkk") && unknown.contains("pod-europe"), "{unknown}");
    assert!(matches!(issue(&dir, "pod-bkk", "a.b", 0), Err(AuthError::BadName(_))));
    assert!(matches!(read_creds("nonsense"), Err(AuthError::Creds(_))));
    // The account's own key signs users with no template: refused as a role's key.
    let account_key = dir.join("keys/account-LEASEHOLD.nk");
    let refused = issue_with_key(&account_key, &dir.join("account.pub"), "pod-bkk", "x", 0).unwrap_err();
    assert!(refused.to_string().contains("not a role's signing key"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_revocation_is_signed_into_the_account_with_the_roles_setup_kept() {
    let dir = scratch("revoke");
    let report = setup(&dir, ROLES, &dcs(), 100).unwrap();
    let pod = read_creds(&issue(&dir, "pod-bkk", "bkk-pod7", 300).unwrap()).unwrap();
    assert!(matches!(revoke(&dir, "not-a-key", 300, 400), Err(AuthError::Creds(_))));
    assert!(matches!(revoke(&dir, &report.account_public_key, 300, 400), Err(AuthError::Creds(_))), "an account key");
    revoke(&dir, &pod.public_key, 300, 400).unwrap();
    revoke(&dir, &pod.public_key, 200, 500).unwrap();

    let operator = KeyPair::from_seed(std::fs::read_to_string(dir.join("keys/operator.nk")).unwrap().trim()).unwrap();
    let resolver = std::fs::read_to_string(dir.join("resolver.conf")).unwrap();
    let account_jwt = resolver
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{}: \"", report.account_public_key)))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap();
    let account = verified_claims(account_jwt, &operator.public_key());
    assert_eq!(account["nats"]["revocations"][&pod.public_key], 300, "the later of the two times is kept");
    let keys = account["nats"]["signing_keys"].as_array().unwrap();
    assert!(keys.iter().any(|k| k["role"] == "pod-europe"), "signed with every role setup kept: {keys:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
