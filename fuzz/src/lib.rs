//! The logic of the fuzz targets, shared with the seed generator
//! (`cargo run --release --example seeds` in `fuzz/`) and with the replay
//! driver that runs them on aarch64 under qemu ([`replay`]).

pub mod packed_file;
pub mod replay;
pub mod seeds;
pub mod validation;
