//! Benchmarks of the high-level operations and of packing, for real Arm
//! hardware (`cargo bench`); under qemu the numbers mean nothing. The test
//! command only compiles them (`cargo bench --no-run`).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::f16;
use kleidiai::formats::{FloatWeights, Int4Encoding, Int4PerChannel, Order};
use kleidiai::weights::{Activation, ActivationMut, DType, PackOptions, PackedWeights, Scratch, WeightsRef};
use kleidiai::{Clamp, Parallelism};
use std::hint::black_box;

const N: usize = 2048;
const K: usize = 2048;

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 2000) as f32 / 1000.0 - 1.0).collect()
}

struct Kind {
    name: &'static str,
    act: DType,
    f32_w: Vec<f32>,
    f16_w: Vec<f16>,
    int4: Vec<u8>,
    scales: Vec<f32>,
}

impl Kind {
    fn weights(&self) -> WeightsRef<'_> {
        match self.name {
            "f32" => WeightsRef::F32(FloatWeights { n: N, k: K, order: Order::NxK, data: &self.f32_w, bias: None }),
            "f16" => WeightsRef::F16(FloatWeights { n: N, k: K, order: Order::NxK, data: &self.f16_w, bias: None }),
            _ => WeightsRef::Int4PerChannel(Int4PerChannel {
                n: N,
                k: K,
                order: Order::NxK,
                encoding: Int4Encoding::Offset8,
                data: &self.int4,
                scales: &self.scales,
                bias: None,
            }),
        }
    }
}

fn kinds() -> Vec<Kind> {
    let f32_w = data(N * K, 1);
    let f16_w: Vec<f16> = f32_w.iter().map(|x| f16::from_f32(*x)).collect();
    let int4: Vec<u8> = (0..N * K / 2).map(|i| (i * 7 % 256) as u8).collect();
    let scales = vec![0.01f32; N];
    ["f32", "f16", "int4"]
        .into_iter()
        .map(|name| Kind {
            name,
            act: if name == "f16" { DType::F16 } else { DType::F32 },
            f32_w: f32_w.clone(),
            f16_w: f16_w.clone(),
            int4: int4.clone(),
            scales: scales.clone(),
        })
        .collect()
}

fn packing(c: &mut Criterion) {
    let mut g = c.benchmark_group("pack");
    g.sample_size(10);
    for kind in kinds() {
        g.throughput(Throughput::Elements((N * K) as u64));
        g.bench_function(kind.name, |b| {
            b.iter(|| {
                PackedWeights::pack(
                    black_box(&kind.weights()),
                    &PackOptions { activation: kind.act, ..Default::default() },
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    g.sample_size(10);
    for kind in kinds() {
        let packed =
            PackedWeights::pack(&kind.weights(), &PackOptions { activation: kind.act, ..Default::default() }).unwrap();
        for m in [1usize, 64] {
            let x32 = data(m * K, 7);
            let x16: Vec<f16> = x32.iter().map(|x| f16::from_f32(*x)).collect();
            let (mut y32, mut y16) = (vec![0f32; m * N], vec![f16::ZERO; m * N]);
            let mut scratch = Scratch::default();
            g.throughput(Throughput::Elements((m * N * K) as u64));
            g.bench_with_input(BenchmarkId::new(kind.name, m), &m, |b, &m| {
                b.iter(|| {
                    let (x, y) = match kind.act {
                        DType::F16 => (Activation::F16(&x16), ActivationMut::F16(&mut y16)),
                        _ => (Activation::F32(&x32), ActivationMut::F32(&mut y32)),
                    };
                    packed.matmul(m, x, y, Clamp::NONE, Parallelism::Rayon(0), &mut scratch).unwrap()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, packing, matmul);
criterion_main!(benches);
