//! Our side of the comparison with ggml's own KleidiAI path (issue 4: "for
//! the same inputs and the same kernel, results equal to ggml's bit for bit").
//!
//! ```text
//! ggml_compare <q4_0|q8_0|f16|f32> <m> <n> <k> <dir>
//! ```
//!
//! Reads the inputs a ggml program wrote (`<dir>/<type>_m<m>_n<n>_k<k>.w.bin`:
//! `n` weight rows of `k` values in ggml's layout; `.x.bin`: `m` rows of `k`
//! f32 activations), runs [`ggml::GgmlWeights::repack`] and `mul_mat` with
//! one thread, writes `.rs.bin` (`m` rows of `n` f32) and prints the kernel
//! used. `GGML_KLEIDIAI_SME` has ggml's meaning.
//!
//! The ggml program and a script that runs both under qemu for several CPU
//! models live outside this repository (`ggmlcmp/run.sh`).

use kleidiai::Parallelism;
use kleidiai::ggml::{GgmlType, GgmlWeights, MulMatScratch, Tensor, TensorMut};

fn main() {
    if let Err(e) = run() {
        eprintln!("ggml_compare: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        return Err("usage: ggml_compare <q4_0|q8_0|f16|f32> <m> <n> <k> <dir>".into());
    }
    let typ = match args[1].as_str() {
        "q4_0" => GgmlType::Q4_0,
        "q8_0" => GgmlType::Q8_0,
        "f16" => GgmlType::F16,
        "f32" => GgmlType::F32,
        t => return Err(format!("unknown type {t}").into()),
    };
    let (m, n, k): (usize, usize, usize) = (args[2].parse()?, args[3].parse()?, args[4].parse()?);
    let base = format!("{}/{}_m{m}_n{n}_k{k}", args[5], args[1]);

    let w = std::fs::read(format!("{base}.w.bin"))?;
    let x = std::fs::read(format!("{base}.x.bin"))?;
    if x.len() != m * k * 4 {
        return Err(format!("{base}.x.bin holds {} bytes, expected {}", x.len(), m * k * 4).into());
    }

    let ne_w = [k as i64, n as i64, 1, 1];
    let src0 = Tensor { typ, ne: ne_w, nb: Tensor::contiguous_strides(typ, ne_w)?, data: &w };
    let weights = GgmlWeights::repack(&src0)?;

    let ne_x = [k as i64, m as i64, 1, 1];
    let src1 = Tensor { typ: GgmlType::F32, ne: ne_x, nb: Tensor::contiguous_strides(GgmlType::F32, ne_x)?, data: &x };
    let mut y = vec![0u8; m * n * 4];
    let ne_y = [n as i64, m as i64, 1, 1];
    let nb_y = Tensor::contiguous_strides(GgmlType::F32, ne_y)?;
    let mut dst = TensorMut { typ: GgmlType::F32, ne: ne_y, nb: nb_y, data: &mut y };
    let mut scratch = MulMatScratch::default();
    weights.mul_mat(&src1, &mut dst, Parallelism::Sequential, &mut scratch)?;
    std::fs::write(format!("{base}.rs.bin"), &y)?;

    for (slot, (gemm, gemv)) in weights.layouts().iter().enumerate() {
        println!("rs layout slot {slot}: {gemm} / {}", gemv.unwrap_or("-"));
    }
    println!("rs kernel for m={m}: {}", weights.kernel_for(m).unwrap_or("reference (no KleidiAI kernel)"));
    Ok(())
}
