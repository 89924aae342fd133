#[cfg(feature = "crd")]
pub mod convert;
#[cfg(feature = "crd")]
pub mod crd;
#[cfg(feature = "crd")]
pub mod quantity;
pub mod validate;
pub mod wire;
