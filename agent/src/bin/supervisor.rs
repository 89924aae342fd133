//! `sandbox-supervisor <state-dir> <exec-id>`: supervises one process; see `sandbox_agent::supervisor`.
fn main() {
    sandbox_agent::supervisor::main()
}
