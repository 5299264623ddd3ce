//! The front door (issue 13): the README's matmul takes at most three
//! imports, and the README shows the table of activation types per weight
//! kind that `kleidiai::weights`' docs include (kleidiai's unit test
//! `the_activation_table_is_what_the_code_does` runs every cell of it).

const README: &str = include_str!("../README.md");
const TABLE: &str = include_str!("../kleidiai/src/weights/activations.md");

#[test]
fn readme_shows_the_weights_table() {
    assert!(README.contains(TABLE), "README.md lacks kleidiai/src/weights/activations.md verbatim: copy it again");
}

#[test]
fn readme_matmul_takes_at_most_three_imports() {
    let start = README.find("Pack weights once, multiply many times:").expect("the README's matmul section");
    let block = &README[start..];
    let block = &block[block.find("```rust").expect("its example")..];
    let block = &block[..block[3..].find("```").expect("the example's end") + 3];
    let imports = block.lines().filter(|l| l.trim_start().starts_with("use ")).count();
    assert!(block.contains(".matmul("), "not the matmul example:\n{block}");
    assert!(imports <= 3, "{imports} imports:\n{block}");
}

#[test]
fn the_prelude_is_enough_for_every_weight_kind() {
    use kleidiai::prelude::*;
    let (n, k) = (4, 64);
    let f = vec![0.5f32; n * k];
    let h = vec![f16::from_f32(0.5); n * k];
    let b = vec![bf16::from_f32(0.5); n * k];
    let i = vec![1i8; n * k];
    let nib = vec![0x11u8; n * k / 2];
    let s = vec![0.5f32; n * k / 32];
    let hs = vec![f16::from_f32(0.5); n * k / 32];
    let q4 = kleidiai::ggml::quantize_q4_0(&f, k).unwrap();
    let q8 = kleidiai::ggml::quantize_q8_0(&f, k).unwrap();
    let all = [
        Weights::f32(n, k, &f),
        Weights::f16(n, k, &h),
        Weights::bf16(n, k, &b),
        Weights::int8_per_channel(n, k, &i, &s),
        Weights::q8_0(n, k, &q8),
        Weights::int4_per_channel(n, k, &nib, &s),
        Weights::int4_blocks(n, k, 32, &nib, &hs),
        Weights::q4_0(n, k, kleidiai::ggml::q4_0_as_bytes(&q4)),
        Weights::int4_asym_blocks(n, k, 32, &nib, &s, &s),
    ];
    let x = vec![1.0f32; 2 * k];
    for w in all {
        let w = w.unwrap();
        let packed = PackedWeights::pack(&w, &PackOptions::default()).unwrap();
        let mut y = vec![0f32; 2 * n];
        let r = packed.matmul(
            2,
            Activation::F32(&x),
            ActivationMut::F32(&mut y),
            Clamp::NONE,
            Parallelism::Sequential,
            &mut Scratch::default(),
        );
        assert!(r.is_ok(), "{:?}: {r:?}", w.kind());
        assert!(y.iter().all(|v| v.is_finite() && *v != 0.0), "{:?}: {y:?}", w.kind());
    }
}
