//! The per-thread seam (`kleidiai::weights::parts`) used from outside the
//! crate, as a caller with threads of its own would: pack into its own
//! memory, resolve the part slots, size and cut the packed LHS, pack rows
//! and run column chunks, checked and unchecked, and compare with a plain
//! f32 product.

use kleidiai::cpu::Features;
use kleidiai::formats::{BlockInt4, Q4_0};
use kleidiai::ggml::{GgmlType, kernel_table};
use kleidiai::weights::parts::{OnThread, OutputBlock, PartKernel, PartSlot};
use kleidiai::weights::{PackedWeights, WeightKind, WeightsRef};
use kleidiai::{AlignedBuf, Error};

/// ggml Q4_0 rows: per 32 values an f16 scale then 16 bytes, value `j` the
/// low nibble of byte `j`, value `j + 16` its high nibble (minus 8).
fn q4_0(n: usize, k: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut data, mut dense) = (Vec::new(), vec![0f32; n * k]);
    for row in 0..n {
        for b in 0..k / 32 {
            let d = kleidiai::half::f16::from_f32(0.01 + rng.f32() * 0.1);
            data.extend_from_slice(&d.to_le_bytes());
            for j in 0..16 {
                let byte = rng.u8(..);
                data.push(byte);
                let at = row * k + b * 32;
                dense[at + j] = ((byte & 15) as f32 - 8.0) * d.to_f32();
                dense[at + j + 16] = ((byte >> 4) as f32 - 8.0) * d.to_f32();
            }
        }
    }
    (data, dense)
}

fn check_close(m: usize, n: usize, k: usize, x: &[f32], w: &[f32], y: &[f32], what: &str) {
    for i in 0..m {
        for j in 0..n {
            let (mut want, mut mag) = (0f32, 0f32);
            for l in 0..k {
                want += x[i * k + l] * w[j * k + l];
                mag += (x[i * k + l] * w[j * k + l]).abs();
            }
            let got = y[i * n + j];
            assert!((got - want).abs() <= 0.02 * mag + 1e-3, "{what}: y[{i}][{j}] = {got}, want {want}");
        }
    }
}

/// Thread-side use of one kernel on `m` rows: checked calls, then the
/// check-then-unchecked form, both compared with the f32 product.
fn run_kernel(kern: &PartKernel, slot: &PartSlot, m: usize, x: &[f32], w: &[f32]) -> Result<(), Error> {
    let (n, k) = (kern.n(), kern.k());
    let ok: OnThread<'_> = kern.on_this_thread()?;
    let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let rhs = slot.rhs().as_bytes();
    assert_eq!(rhs.len(), kern.rhs_len());
    assert_eq!(kern.nr(), slot.rhs().layout().r, "the kernel's nr is the layout's");

    // The packed LHS, cut between two "threads" at a multiple of mr.
    let size = kern.lhs_size(m);
    assert_eq!(size == 0, kern.reads_lhs_directly(), "{}", kern.lhs_packer());
    let mut lhs = vec![0u8; size.max(1)];
    let split = if m > kern.mr() { kern.mr() } else { m };
    for rows in [0..split, split..m] {
        if rows.is_empty() || kern.reads_lhs_directly() {
            continue;
        }
        let (off, end) = (kern.lhs_offset(rows.start), if rows.end == m { size } else { kern.lhs_offset(rows.end) });
        kern.pack_rows(&ok, rows.len(), &src[rows.start * k * 4..], k * 4, &mut lhs[off..end])?;
    }
    let (lhs, lhs_stride) = if kern.reads_lhs_directly() { (&src[..], k * 4) } else { (&lhs[..size], 0) };

    // Columns in chunks of n_step, checked.
    let mut y = vec![f32::NAN; m * n];
    let step = kern.n_step().max(1);
    let mut block = OutputBlock::from_slice(&mut y, m, n)?;
    for start in (0..n).step_by(step) {
        let end = (start + step).min(n);
        let mut cols = block.columns(start..end)?;
        kern.run_cols(&ok, m, start..end, lhs, lhs_stride, rhs, &mut cols)?;
    }
    // Columns that do not start at a multiple of n_step are refused.
    if step > 1 {
        let mut cols = block.columns(1..2)?;
        assert!(kern.run_cols(&ok, m, 1..2, lhs, lhs_stride, rhs, &mut cols).is_err());
    }
    check_close(m, n, k, x, w, &y, kern.info().name);

    // Check once, then the unchecked calls.
    let mut packed = vec![0u8; size.max(1)];
    kern.check_pack(m, (src.as_ptr(), src.len()), k * 4, size, size)?;
    // SAFETY: check_pack passed for these pointers, lengths and the true
    // lhs_size(m); `src` and `packed` live and are not otherwise used
    // during the call; `ok` is this kernel's, on this thread.
    unsafe { kern.pack_rows_unchecked(&ok, m, src.as_ptr(), k * 4, packed.as_mut_ptr()) };
    let lhs = if kern.reads_lhs_directly() { (src.as_ptr(), src.len()) } else { (packed.as_ptr(), size) };
    kern.check_operands(m, lhs, lhs_stride, rhs.len())?;
    let mut y2 = vec![f32::NAN; m * n];
    // SAFETY: check_operands passed for this LHS and RHS (alive, unchanged);
    // the columns are all n, from 0; `y2` is an exclusive m x n block of
    // f32 rows 4n bytes apart; `ok` is this kernel's, on this thread.
    unsafe { kern.run_cols_unchecked(&ok, m, 0..n, lhs.0, lhs_stride, rhs.as_ptr(), y2.as_mut_ptr(), n * 4) };
    assert_eq!(
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        y2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "{}: checked and unchecked calls give the same bits",
        kern.info().name
    );
    Ok(())
}

#[test]
fn part_slots_from_outside_the_crate() -> Result<(), Error> {
    let (n, k) = (64, 96);
    let f = Features::current();
    let table = kernel_table(GgmlType::Q4_0);
    let len = match PackedWeights::packed_payload_len(WeightKind::Int4Block, n, k, 32, table, &f) {
        Ok(len) => len,
        Err(e) => {
            // No kernel of the table runs on this CPU (x86, or no dotprod):
            // said by name; with dotprod one must run.
            assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            assert!(!f.has(kleidiai::cpu::CpuFeature::Dotprod), "parts_seam: dotprod present, yet {e}");
            eprintln!("parts_seam: SKIPPED on this CPU, no Q4_0 kernel of ggml's table runs here: {e}");
            return Ok(());
        }
    };
    let (data, dense) = q4_0(n, k, 7);
    let w = WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &data, bias: None }));
    let packed = PackedWeights::pack_for_parts(&w, table, &f)?;
    assert!(packed.into_caller_memory(AlignedBuf::zeroed(len - 1)).is_err(), "too small a destination");
    let packed = PackedWeights::pack_for_parts(&w, table, &f)?.into_caller_memory(AlignedBuf::zeroed(len))?;
    let slots = packed.part_slots(&f)?;
    assert!(!slots.is_empty());
    assert!(packed.slot_bytes().iter().sum::<usize>() <= len);

    let mut rng = fastrand::Rng::with_seed(3);
    for slot in &slots {
        assert!(slot.rhs().is_shared(), "the slot views the caller's memory");
        assert!(core::ptr::eq(slot.kernel(5), slot.gemm()));
        for m in [1, 5, 17] {
            let kern = slot.kernel(m);
            if m == 1 {
                if let Some(g) = slot.gemv() {
                    assert!(core::ptr::eq(kern, g));
                }
            }
            assert!(kern.lhs_size(m) > 0, "{}: Q4_0 kernels read a packed LHS", kern.info().name);
            assert_eq!(kern.lhs_offset(0), 0);
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32() * 2.0 - 1.0).collect();
            eprintln!("{} (LHS {}), m = {m}", kern.info().name, kern.lhs_packer());
            run_kernel(kern, slot, m, &x, &dense)?;
        }
    }
    Ok(())
}
