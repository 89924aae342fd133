#[cfg(feature = "crd")]
pub mod crd;
pub mod wire;
