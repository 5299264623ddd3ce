//! Packing: [`PackedWeights::pack`] and what a packed value holds.

use super::*;

impl PackedWeights {
    /// Packs `w` for the first [`policy`] pairing this CPU runs (the GEMM
    /// and the GEMV kernel that share one packed layout), with what `opts`
    /// asks to keep besides. Errors when the weights are invalid or no
    /// operation takes them with `opts.activation` (the same on every CPU:
    /// a kernel that cannot take these particular weights, a bias or a
    /// block length, say, is passed over for the next pairing, or the
    /// portable reference).
    pub fn pack(w: &WeightsRef<'_>, opts: &PackOptions) -> Result<PackedWeights> {
        w.validate()?;
        if !operation_exists(w.kind(), opts.activation) {
            return Err(Error::NoOperation { weights: w.kind_name(), activation: opts.activation.name() });
        }
        if let WeightsRef::Int4AsymBlock(a) = w {
            // The asymmetric int4 kernels and their reference read whole
            // 32-value blocks.
            crate::error::multiple_of(a.bl, 32, "bl", "asymmetric int4 kernels take blocks of a multiple of 32")?;
        }
        Self::pack_with(w, policy::pairings(w.kind(), opts.activation), opts)
    }

    /// [`pack`](Self::pack) with kernels of your choosing: the first of
    /// `pairings` whose GEMM kernel runs here and takes these weights (and,
    /// with [`PackOptions::non_sme_layout`], when that one is an SME kernel,
    /// also the first that is not). Each pairing's GEMV kernel must read
    /// its GEMM kernel's layout. ggml's tables go through here
    /// ([`crate::ggml::kernel_table`]).
    ///
    /// Errors: invalid weights, a kernel name this build does not have for
    /// this weight kind and activation type ([`Error::UnknownKernel`]), a
    /// GEMV kernel that reads another layout. No pairing that runs here is
    /// not an error: the reference copy then serves (on a target without
    /// kernels, always).
    ///
    /// ```
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::weights::{policy, DType, PackOptions, PackedWeights, WeightKind, WeightsRef};
    /// let w = vec![0.5f32; 16 * 32];
    /// let w = WeightsRef::F32(FloatWeights { n: 16, k: 32, order: Order::NxK, data: &w, bias: None });
    /// // Only the NEON pairing of the default table:
    /// let neon = policy::pairings(WeightKind::F32, DType::F32).last().copied().unwrap();
    /// let p = PackedWeights::pack_with(&w, &[neon], &PackOptions::default()).unwrap();
    /// assert!(p.layouts().len() <= 1);
    /// ```
    pub fn pack_with(w: &WeightsRef<'_>, pairings: &[Pairing], opts: &PackOptions) -> Result<PackedWeights> {
        w.validate()?;
        let non_finite = non_finite::channels(w);
        // ggml Q8_0 is repacked as int8 per channel (ggml's own requantisation).
        let requantized;
        let view;
        let w = match w {
            WeightsRef::GgmlQ8_0 { n, k, blocks } => {
                requantized = requantize_q8_0(*n, *k, blocks)?;
                view = requantized.as_ref();
                &view
            }
            other => other,
        };
        let (n, k) = w.shape();
        let (bl, kind, act) = (w.bl(), w.kind(), opts.activation);
        let f = opts.features.unwrap_or_else(Features::current);
        // A kernel of this weight kind and activation type that runs here,
        // wrapped to pack per call when its packer converts the weights.
        let resolve = |name: &str| -> Result<Option<Box<dyn Backend>>> {
            if registry::kernels().is_empty() {
                return Ok(None); // no kernels on this target: the reference serves
            }
            let b = backend_for(kind, act, name).ok_or_else(|| Error::UnknownKernel(name.to_string()))?;
            if b.info().supported(&f).is_err() {
                return Ok(None);
            }
            Ok(Some(match policy::converted(kind, b.info().family) {
                Some(elem) if opts.keep_as_given => Box::new(PerCall::new(b, elem, w.has_bias())),
                _ => b,
            }))
        };
        let mut slots: Vec<Slot> = Vec::new();
        for sme in [true, false] {
            // The second pass only for a non-SME copy beside an SME one.
            let second = opts.non_sme_layout && slots.first().is_some_and(|s| s.gemm.info().is_sme());
            if !sme && !second {
                break;
            }
            for p in pairings {
                let Some(gemm) = resolve(p.gemm)? else { continue };
                if (!sme && gemm.info().is_sme()) || (w.has_bias() && !gemm.takes_bias()) {
                    continue;
                }
                // A kernel that cannot take these weights (a packer without
                // a K x N variant, scales out of its range...): the next
                // pairing serves instead.
                let Ok(layout) = gemm.rhs_layout(n, k, bl) else { continue };
                let Ok(rhs) = gemm.pack(w) else { continue };
                let gemv = match p.gemv {
                    Some(name) => match resolve(name)? {
                        Some(v) if sme || !v.info().is_sme() => {
                            if v.rhs_layout(n, k, bl)? != layout {
                                let why = format!("does not read {}'s packed layout", p.gemm);
                                return Err(Error::WrongFamily { kernel: name, why });
                            }
                            Some(v)
                        }
                        _ => None,
                    },
                    None => None,
                };
                slots.push(Slot { gemm, gemv, rhs: rhs.into_shared() });
                // The faster GEMV's own layout, when asked for.
                if let (true, true, Some(name)) = (opts.separate_gemv, sme, p.faster_gemv) {
                    if let Some(v) = resolve(name)? {
                        if let (Ok(_), Ok(rhs)) = (v.rhs_layout(n, k, bl), v.pack(w)) {
                            slots.push(Slot { gemm: v, gemv: None, rhs: rhs.into_shared() });
                        }
                    }
                }
                break;
            }
        }
        let per_call = slots.iter().any(|s| PerCall::is_format(s.rhs.layout().format));
        let reference =
            if slots.is_empty() || (opts.keep_reference && !per_call) { Some(w.to_owned_weights()?) } else { None };
        let policy = NonFinite::Propagate;
        Ok(PackedWeights {
            id: next_weights_id(),
            n,
            k,
            kind,
            activation: act,
            slots,
            reference,
            non_finite_channels: non_finite,
            policy,
        })
    }

    /// Whether the portable reference can run: a copy of the unpacked
    /// weights was kept, or a layout holds the weights as given.
    pub fn has_reference(&self) -> bool {
        self.reference.is_some() || self.per_call_slot().is_some()
    }

    /// The slot that keeps the weights as given (packed per call), if any.
    pub(super) fn per_call_slot(&self) -> Option<(PerCall, &PackedRhs)> {
        self.slots.iter().find_map(|s| PerCall::for_format(s.gemm.boxed(), s.rhs.layout().format).map(|p| (p, &s.rhs)))
    }

    /// The portable reference over the kept weights: the unpacked copy, or
    /// the weights kept as given by a per-call layout (None: neither).
    pub(super) fn run_reference(
        &self,
        m: usize,
        x: Activation<'_>,
        y: ActivationMut<'_>,
        clamp: Clamp,
        work: &mut Work,
    ) -> Option<Result<()>> {
        if let Some(r) = &self.reference {
            return Some(reference(r.as_ref(), m, x, y, clamp));
        }
        let (p, rhs) = self.per_call_slot()?;
        Some(match (x, y) {
            (Activation::F32(x), ActivationMut::F32(y)) => p.reference(m, x, rhs, y, clamp, &mut work.per_call),
            (Activation::F32(_), y) => Err(Error::ElementType {
                what: "outputs of weights kept as given",
                expected: "F32",
                got: y.dtype().name(),
            }),
            (x, _) => Err(Error::ElementType {
                what: "activations of weights kept as given",
                expected: "F32",
                got: x.dtype().name(),
            }),
        })
    }

    /// `matmul` on the portable reference over the kept weights, whatever
    /// kernels could run; an error when none were kept.
    pub fn matmul_reference(
        &self,
        m: usize,
        x: Activation<'_>,
        y: ActivationMut<'_>,
        clamp: Clamp,
        scratch: &mut Scratch,
    ) -> Result<()> {
        self.check_call(m, &x, &y)?;
        let work = scratch.work.get_or_insert_with(Work::default);
        self.run_reference(m, x, y, clamp, work).unwrap_or_else(|| {
            Err(Error::Unsupported {
                kernel: "portable reference",
                why: "these weights hold only packed layouts (no unpacked copy was kept)".into(),
            })
        })
    }

    /// Bytes of the packed layouts these weights hold (each a copy of the
    /// weights in a kernel's format; weights packed per call count as the
    /// copy they keep). [`PackOptions`] says what each layout costs.
    ///
    /// ```
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::weights::{PackOptions, PackedWeights, WeightsRef};
    /// let data = vec![0.25f32; 64 * 128];
    /// let w = WeightsRef::F32(FloatWeights { n: 64, k: 128, order: Order::NxK, data: &data, bias: None });
    /// let p = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
    /// // One copy (or, with no kernel here, the reference copy instead),
    /// // plus the kernel's bias slots.
    /// let held = p.packed_bytes() + p.reference_bytes();
    /// assert!(held as f64 <= 1.02 * w.bytes() as f64 + 64.0 * 4.0);
    /// ```
    pub fn packed_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.rhs.as_bytes().len()).sum()
    }

    /// Bytes of each packed layout, in slot order.
    pub fn slot_bytes(&self) -> Vec<usize> {
        self.slots.iter().map(|s| s.rhs.as_bytes().len()).collect()
    }

    /// Bytes of the copy of the unpacked weights kept for the portable
    /// reference (0: none kept; see [`PackOptions::keep_reference`]).
    pub fn reference_bytes(&self) -> usize {
        self.reference.as_ref().map_or(0, |r| r.as_ref().bytes())
    }

    /// Output channels.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Inputs per channel.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The weight kind.
    pub fn kind(&self) -> WeightKind {
        self.kind
    }

    /// The packed layouts held: (GEMM kernel, GEMV kernel sharing it).
    pub fn layouts(&self) -> Vec<(&'static str, Option<&'static str>)> {
        self.slots.iter().map(|s| (s.gemm.info().name, s.gemv.as_ref().map(|g| g.info().name))).collect()
    }
}
