#[cfg(feature = "crd")]
pub mod crd;
#[cfg(feature = "crd")]
pub mod quantity;
pub mod wire;
