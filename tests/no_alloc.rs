//! Steady-state calls do not allocate: after the first `matmul` with a
//! given `Scratch`, further calls (same shapes, sequential) allocate nothing.

mod common;

use half::{bf16, f16};
use kleidiai::formats::{
    BlockInt4, FloatWeights, Int4AsymBlock, Int4Encoding, Int4PerChannel, Int8PerChannel, NibbleOrder, Order, Q4_0,
};
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_of(f: impl FnOnce()) -> usize {
    let before = ALLOCS.load(Ordering::Relaxed);
    f();
    ALLOCS.load(Ordering::Relaxed) - before
}

#[test]
fn steady_state_matmul_does_not_allocate() {
    let (n, k) = (64, 128);
    let mut rng = common::Rng::new(3);
    let f = rng.vec_f32(n * k);
    let h: Vec<f16> = f.iter().map(|v| f16::from_f32(*v)).collect();
    let b: Vec<bf16> = f.iter().map(|v| bf16::from_f32(*v)).collect();
    let i8s: Vec<i8> = (0..n * k).map(|_| rng.next_u64() as i8).collect();
    let i4: Vec<u8> = (0..n * k / 2).map(|_| rng.next_u64() as u8).collect();
    let scales = vec![0.01f32; n];
    let block_scales = vec![0.01f32; n * k / 32];
    let q4 = kleidiai::ggml::quantize_q4_0(&f, k).unwrap();
    let q4b = kleidiai::ggml::q4_0_as_bytes(&q4).to_vec();
    let fw = |data| FloatWeights { n, k, order: Order::NxK, data, bias: None };
    let kinds: Vec<(&str, WeightsRef<'_>, DType)> = vec![
        ("f32", WeightsRef::F32(fw(&f)), DType::F32),
        ("f16", WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &h, bias: None }), DType::F32),
        ("f16/f16", WeightsRef::F16(FloatWeights { n, k, order: Order::NxK, data: &h, bias: None }), DType::F16),
        ("bf16", WeightsRef::Bf16(FloatWeights { n, k, order: Order::NxK, data: &b, bias: None }), DType::F32),
        (
            "int8",
            WeightsRef::Int8PerChannel(Int8PerChannel {
                n,
                k,
                order: Order::NxK,
                data: &i8s,
                scales: &scales,
                bias: None,
            }),
            DType::F32,
        ),
        (
            "int4",
            WeightsRef::Int4PerChannel(Int4PerChannel {
                n,
                k,
                order: Order::NxK,
                encoding: Int4Encoding::Signed,
                data: &i4,
                scales: &scales,
                bias: None,
            }),
            DType::F32,
        ),
        ("q4_0", WeightsRef::Int4Block(BlockInt4::Q4_0(Q4_0 { n, k, data: &q4b, bias: None })), DType::F32),
        (
            "int4 asym",
            WeightsRef::Int4AsymBlock(Int4AsymBlock {
                n,
                k,
                bl: 32,
                encoding: Int4Encoding::Offset8,
                nibbles: NibbleOrder::LowFirst,
                data: &i4,
                scales: &block_scales,
                offsets: &block_scales,
                bias: None,
            }),
            DType::F32,
        ),
    ];
    let mut report = Vec::new();
    for (name, w, act) in kinds {
        let p = PackedWeights::pack(&w, &PackOptions { activation: act, ..Default::default() }).unwrap();
        for m in [1usize, 7] {
            let x32 = rng.vec_f32(m * k);
            let x16: Vec<f16> = x32.iter().map(|v| f16::from_f32(*v)).collect();
            let (mut y32, mut y16) = (vec![0f32; m * n], vec![f16::ZERO; m * n]);
            let mut s = Scratch::default();
            let mut call = |s: &mut Scratch| match act {
                DType::F16 => p.matmul(
                    m,
                    Activation::F16(&x16),
                    ActivationMut::F16(&mut y16),
                    Clamp::NONE,
                    Parallelism::Sequential,
                    s,
                ),
                _ => p.matmul(
                    m,
                    Activation::F32(&x32),
                    ActivationMut::F32(&mut y32),
                    Clamp::NONE,
                    Parallelism::Sequential,
                    s,
                ),
            };
            call(&mut s).unwrap();
            let count = allocations_of(|| call(&mut s).unwrap());
            report.push(format!("{name} m={m} via {}: {count}", p.kernel_for(m).unwrap_or("reference")));
            // The portable reference allocates (it is the fallback, not
            // the fast path); every kernel path must not.
            if p.kernel_for(m).is_some() {
                assert_eq!(count, 0, "{name} m={m}: {} allocated {count} times", p.kernel_for(m).unwrap());
            }
        }
    }
    println!("{}", report.join("\n"));
}
