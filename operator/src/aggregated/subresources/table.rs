//! What a request's process is, wherever it was found: the seam between the subresource
//! handlers and the table of `processes` the wing above keeps (it implements [`ProcessTable`]).

/// The process a request is about.
#[derive(Debug)]
pub struct Located {
    /// The URL of the agent serving the process's node.
    pub agent: String,
    pub exec_id: String,
    /// The process's pod: the one named, or the one the selector chose.
    pub pod: String,
    /// It runs on a terminal (`spec.tty`): only then can it be resized.
    pub tty: bool,
}

/// The replica's table of `processes` (`Door::Process`), as the subresources need it: kept by
/// the processes wing, which sits above this one.
pub trait ProcessTable: Send + Sync {
    /// The process `namespace/name`, if this replica serves one by that name.
    fn locate(&self, namespace: &str, name: &str) -> Option<Located>;
}
