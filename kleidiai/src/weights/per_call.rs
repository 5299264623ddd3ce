//! Weights kept as given and packed on every call, a chunk of output
//! channels at a time: f16 or bf16 weights on kernels that take f32 when
//! asked ([`PackOptions::keep_as_given`](super::PackOptions::keep_as_given):
//! one copy the size of the input instead of a widened f32 copy twice its
//! size), and ggml's F16 weights (which ggml itself packs per call).
//!
//! The stored layout is the weights' own values, N x K, after an optional
//! f32 bias. Each call widens one chunk of channels to f32 (a multiple of
//! the kernel's row block, about [`CHUNK_BYTES`] of f32), packs it for the
//! kernel with the kernel's own packer, runs the kernel on it, and moves on:
//! every output column is computed from the very bytes a packed copy would
//! hold, so results are bit-identical to packing once; only the work per
//! call differs (the widening and packing, measured in the README).

use super::backend::Backend;
use super::work::{Buffers, Work};
use super::{Activation, ActivationMut, WeightsRef};
use crate::buffer::AlignedBuf;
use crate::error::{self, Error, Result};
use crate::formats::{FloatWeights, Order};
use crate::packed::{Clamp, PackedLayout, PackedRhs};
use crate::par::Parallelism;
use crate::registry::KernelInfo;
use half::{bf16, f16};

/// f32 bytes of one chunk of widened weights (the packed chunk is about as
/// large again): small enough to stay in a core's caches, large enough that
/// a kernel's column step fits many times.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// The element type the weights are kept in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    F16,
    Bf16,
}

/// A kernel whose weights are packed per call.
#[derive(Debug)]
pub(crate) struct PerCall {
    inner: Box<dyn Backend>,
    elem: Elem,
    bias: bool,
}

const FORMATS: [(&str, Elem, bool); 4] = [
    ("f16.nxk.percall", Elem::F16, false),
    ("f16.nxk.biasf32.percall", Elem::F16, true),
    ("bf16.nxk.percall", Elem::Bf16, false),
    ("bf16.nxk.biasf32.percall", Elem::Bf16, true),
];

impl PerCall {
    /// `inner` with weights of `elem` kept as given (`bias`: with a bias).
    pub(crate) fn new(inner: Box<dyn Backend>, elem: Elem, bias: bool) -> PerCall {
        PerCall { inner, elem, bias }
    }

    /// The wrapper that reads a stored layout of `format`, if it is one.
    pub(crate) fn for_format(inner: Box<dyn Backend>, format: &str) -> Option<PerCall> {
        FORMATS.iter().find(|f| f.0 == format).map(|&(_, elem, bias)| PerCall { inner, elem, bias })
    }

    /// Whether `format` is a layout of weights kept as given.
    pub(crate) fn is_format(format: &str) -> bool {
        FORMATS.iter().any(|f| f.0 == format)
    }

    /// The stored layout's format of weights of `elem`, with a bias or not.
    fn format(elem: Elem, bias: bool) -> &'static str {
        FORMATS.iter().find(|f| f.1 == elem && f.2 == bias).map_or("", |f| f.0)
    }

    /// Bytes of the bias that precedes the values.
    fn bias_bytes(&self, n: usize) -> usize {
        if self.bias { n * 4 } else { 0 }
    }

    /// Channel `row` of the kept weights, widened, into `out[..k]` (with
    /// half's vector conversions where the CPU has them).
    fn widen_row(&self, rhs: &PackedRhs, row: usize, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        use zerocopy::FromBytes;
        let l = rhs.layout();
        let at = self.bias_bytes(l.rows) + row * l.k * 2;
        let bytes = &rhs.as_bytes()[at..at + l.k * 2];
        let out = &mut out[..l.k];
        // The values start 2-byte aligned (the buffer is 64-byte aligned,
        // the bias before them 4 bytes a channel), so the views succeed; a
        // byte at a time otherwise.
        match self.elem {
            Elem::F16 => match <[f16]>::ref_from_bytes(bytes) {
                Ok(v) => v.convert_to_f32_slice(out),
                Err(_) => {
                    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                        *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
                    }
                }
            },
            Elem::Bf16 => match <[bf16]>::ref_from_bytes(bytes) {
                Ok(v) => v.convert_to_f32_slice(out),
                Err(_) => {
                    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                        *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                    }
                }
            },
        }
    }

    /// The bias of channels `rows` into `out`.
    fn bias_of(&self, rhs: &PackedRhs, rows: core::ops::Range<usize>, out: &mut Vec<f32>) {
        out.clear();
        let b = rhs.as_bytes();
        out.extend(rows.map(|r| f32::from_le_bytes([b[4 * r], b[4 * r + 1], b[4 * r + 2], b[4 * r + 3]])));
    }

    /// Channels per chunk: about [`CHUNK_BYTES`] of f32, a multiple of the
    /// kernel's row block `r`, at least one block.
    fn chunk(k: usize, r: usize) -> usize {
        let r = r.max(1);
        (CHUNK_BYTES / (4 * k.max(1)) / r * r).max(r)
    }

    /// `y = x · wᵀ (+ bias)`, clamped, with `each` computing one chunk from
    /// the widened chunk's weights (the output of a chunk goes straight to
    /// `y` when it is all of `y`, else through a buffer).
    #[allow(clippy::too_many_arguments)] // the matmul's own arguments plus the chunk computation
    fn chunked(
        &self,
        m: usize,
        x: &[f32],
        rhs: &PackedRhs,
        y: &mut [f32],
        r: usize,
        order: Order,
        zero_bias: bool,
        bufs: &mut Buffers,
        mut each: impl FnMut(&FloatWeights<'_, f32>, &mut [f32], &mut Option<PackedRhs>) -> Result<()>,
    ) -> Result<()> {
        let (n, k) = (rhs.layout().rows, rhs.layout().k);
        error::at_least(x.len(), error::mul(m, k, "activations")?, "activations")?;
        error::at_least(y.len(), error::mul(m, n, "outputs")?, "outputs")?;
        let chunk = Self::chunk(k, r).min(n);
        let Buffers { widened, bias, packed, out, row } = bufs;
        widened.resize(chunk * k, 0.0);
        let mut c0 = 0;
        while c0 < n {
            let cn = chunk.min(n - c0);
            match order {
                Order::NxK => {
                    for (i, dst) in widened[..cn * k].chunks_exact_mut(k).enumerate() {
                        self.widen_row(rhs, c0 + i, dst);
                    }
                }
                Order::KxN => {
                    // Columns of the K x N chunk, one channel at a time.
                    row.resize(k, 0.0);
                    for i in 0..cn {
                        self.widen_row(rhs, c0 + i, row);
                        for (p, v) in row.iter().enumerate() {
                            widened[p * cn + i] = *v;
                        }
                    }
                }
            }
            if self.bias {
                self.bias_of(rhs, c0..c0 + cn, bias);
            } else if zero_bias {
                // The packers store a zero bias for weights without one:
                // hand them one, so they need not allocate it.
                bias.clear();
                bias.resize(cn, 0.0);
            }
            let w = FloatWeights {
                n: cn,
                k,
                order,
                data: &widened[..cn * k],
                bias: (self.bias || zero_bias).then_some(&bias[..]),
            };
            if cn == n {
                each(&w, &mut y[..m * n], packed)?;
            } else {
                out.resize(m * cn, 0.0);
                each(&w, &mut out[..m * cn], packed)?;
                for i in 0..m {
                    y[i * n + c0..i * n + c0 + cn].copy_from_slice(&out[i * cn..(i + 1) * cn]);
                }
            }
            c0 += cn;
        }
        Ok(())
    }

    /// The portable reference over the kept weights (what a packed copy of
    /// f32 weights computes with no kernel), chunk by chunk.
    pub(crate) fn reference(
        &self,
        m: usize,
        x: &[f32],
        rhs: &PackedRhs,
        y: &mut [f32],
        clamp: Clamp,
        bufs: &mut Buffers,
    ) -> Result<()> {
        clamp.check()?;
        self.chunked(m, x, rhs, y, 1, Order::NxK, false, bufs, |w, y, _| {
            crate::families::matmul_clamp_f32_f32_f32p::reference(m, x, w, clamp, y)
        })
    }
}

impl Backend for PerCall {
    fn info(&self) -> &'static KernelInfo {
        self.inner.info()
    }
    fn boxed(&self) -> Box<dyn Backend> {
        Box::new(PerCall { inner: self.inner.boxed(), elem: self.elem, bias: self.bias })
    }
    fn rhs_layout(&self, n: usize, k: usize, _bl: usize) -> Result<PackedLayout> {
        // The kernel must run here (its own layout query checks).
        self.inner.rhs_layout(n, k, 0)?;
        Ok(PackedLayout {
            format: Self::format(self.elem, self.bias),
            rows: n,
            k,
            r: 1,
            kr: 1,
            sr: 1,
            bl: 0,
            vector_bytes: 0,
        })
    }
    fn pack(&self, w: &WeightsRef<'_>) -> Result<PackedRhs> {
        fn store<T: crate::formats::FloatElement>(
            me: &PerCall,
            w: &FloatWeights<'_, T>,
            bytes: impl Fn(T) -> [u8; 2],
            widen: impl Fn(T) -> f32,
        ) -> Result<PackedRhs> {
            w.validate()?;
            let (n, k) = (w.n, w.k);
            if w.bias.is_some() != me.bias {
                return Err(Error::bad_value(
                    "bias",
                    if w.bias.is_some() { "given" } else { "absent" },
                    format!(
                        "{} is packed per call {} a bias",
                        me.info().name,
                        if me.bias { "with" } else { "without" }
                    ),
                ));
            }
            let values = error::mul(error::mul(n, k, "weights")?, 2, "weights")?;
            let mut buf = AlignedBuf::zeroed(me.bias_bytes(n) + values);
            let out = buf.as_mut_slice();
            if let Some(b) = w.bias {
                for (o, v) in out.chunks_exact_mut(4).zip(&b[..n]) {
                    o.copy_from_slice(&widen(*v).to_le_bytes());
                }
            }
            let data = w.data_in(Order::NxK);
            for (o, v) in out[me.bias_bytes(n)..].chunks_exact_mut(2).zip(&data[..n * k]) {
                o.copy_from_slice(&bytes(*v));
            }
            Ok(PackedRhs::new(me.rhs_layout(n, k, 0)?, buf))
        }
        match (w, self.elem) {
            (WeightsRef::F16(w), Elem::F16) => store(self, w, f16::to_le_bytes, f16::to_f32),
            (WeightsRef::Bf16(w), Elem::Bf16) => store(self, w, bf16::to_le_bytes, bf16::to_f32),
            (other, _) => Err(super::backend::wrong_kind(self.info(), other.kind_name())),
        }
    }
    fn run(
        &self,
        m: usize,
        x: Activation<'_>,
        rhs: &PackedRhs,
        y: ActivationMut<'_>,
        clamp: Clamp,
        par: Parallelism,
        work: &mut Work,
    ) -> Result<()> {
        let (n, k) = (rhs.layout().rows, rhs.layout().k);
        rhs.expect(&self.rhs_layout(n, k, 0)?, self.info().name)?;
        let (Activation::F32(x), ActivationMut::F32(y)) = (x, y) else {
            return Err(super::backend::wrong_kind(self.info(), "these activation types"));
        };
        clamp.check()?;
        let r = self.inner.rhs_layout(Self::chunk(k, 1).min(n), k, 0)?.r;
        let Work { lhs, per_call } = work;
        let mut inner_work =
            Work { lhs: core::mem::replace(lhs, crate::packed::PackedLhs::empty()), ..Work::default() };
        let order = self.inner.rhs_order();
        let result = self.chunked(m, x, rhs, y, r, order, true, per_call, |w, y, packed| {
            let p = packed.get_or_insert_with(PackedRhs::empty);
            self.inner.pack_reusing(&WeightsRef::F32(*w), p)?;
            self.inner.run(m, Activation::F32(x), p, ActivationMut::F32(y), clamp, par, &mut inner_work)
        });
        *lhs = inner_work.lhs;
        result
    }
    fn takes_bias(&self) -> bool {
        self.inner.takes_bias()
    }
    fn unpack_row(&self, rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = rhs.layout();
        if row >= l.rows {
            return Err(Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        self.widen_row(rhs, row, &mut out[..l.k]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_whole_row_blocks_of_about_a_mebibyte() {
        assert_eq!(PerCall::chunk(1024, 16), 256);
        assert_eq!(PerCall::chunk(4096, 16), 64);
        assert_eq!(PerCall::chunk(1 << 20, 16), 16, "at least one block");
        assert_eq!(PerCall::chunk(1000, 12) % 12, 0);
        assert_eq!(PerCall::chunk(0, 0), CHUNK_BYTES / 4);
    }

    #[test]
    fn formats_round_trip() {
        for (name, elem, bias) in FORMATS {
            assert!(PerCall::is_format(name));
            assert_eq!(PerCall::format(elem, bias), name);
        }
        assert!(!PerCall::is_format("f32p2vlx1biasf32"));
    }
}
