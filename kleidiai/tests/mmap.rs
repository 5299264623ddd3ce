//! Packed weights saved to a file and loaded from a memory map of it, as a
//! server loading a model would: the packed payloads stay in the mapping
//! (no copy) and matmul gives the same bits as the weights that were saved.

use kleidiai::cpu::Features;
use kleidiai::prelude::*;
use std::sync::Arc;

#[test]
fn load_from_a_memory_mapped_file_without_copying() {
    let (n, k, m) = (21, 64, 4);
    let mut rng = fastrand::Rng::with_seed(14);
    let w: Vec<f32> = (0..n * k).map(|_| rng.f32() - 0.5).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
    let packed = PackedWeights::pack(&Weights::f32(n, k, &w).unwrap(), &PackOptions::default()).unwrap();
    let bytes = match packed.to_bytes() {
        Ok(b) => b,
        Err(e) => {
            // Only a CPU with no kernel for f32 weights packs nothing (and
            // then there is nothing to save): say so by name.
            assert!(packed.layouts().is_empty(), "packed weights that do not save: {e}");
            println!("load_from_a_memory_mapped_file_without_copying: NOT RUN (no f32 kernel on this CPU)");
            return;
        }
    };
    let path = std::env::temp_dir().join(format!("kleidiai-mmap-test-{}.kaiw", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: the file is private to this test and not modified while mapped.
    let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
    std::fs::remove_file(&path).ok();
    let span = map.as_ptr_range();
    let loaded = PackedWeights::from_shared(map.clone()).unwrap();

    let slots = loaded.part_slots(&Features::current()).unwrap();
    assert!(!slots.is_empty());
    for s in &slots {
        assert!(s.rhs().is_shared(), "payloads stay in the mapping");
        let p = s.rhs().as_bytes().as_ptr_range();
        assert!(span.start <= p.start && p.end <= span.end, "the payload is inside the mapping");
    }
    let run = |w: &PackedWeights| {
        let mut y = vec![0f32; m * n];
        let mut scratch = Scratch::default();
        w.matmul(
            m,
            Activation::F32(&x),
            ActivationMut::F32(&mut y),
            Clamp::NONE,
            Parallelism::Sequential,
            &mut scratch,
        )
        .unwrap();
        y
    };
    let (a, b) = (run(&packed), run(&loaded));
    assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "the mapped weights give the same bits");
}
