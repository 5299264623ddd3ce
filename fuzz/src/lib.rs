//! The logic of the fuzz targets, shared with the seed generator
//! (`cargo run --release --example seeds` in `fuzz/`).

pub mod seeds;
pub mod validation;
