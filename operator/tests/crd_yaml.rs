//! The committed CRD must be exactly what `crdgen` prints, so the YAML users apply never drifts
//! from the types the operator uses.
use std::path::PathBuf;

#[test]
fn committed_crd_matches_crdgen() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(sandbox_operator::crdgen::CRD_PATH);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let generated = sandbox_operator::crdgen::yaml();
    assert!(
        committed == generated,
        "{} is out of date; regenerate it with\n  cargo run -q -p sandbox-operator --bin crdgen > {}",
        path.display(),
        sandbox_operator::crdgen::CRD_PATH
    );
}
