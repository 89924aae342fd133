//! `sandbox-supervisor <state-dir> <exec-id>`: supervises one process; see `sandbox_supervisor`.
fn main() {
    sandbox_supervisor::main()
}
