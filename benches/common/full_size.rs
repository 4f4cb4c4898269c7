//! The committed full-size Llama-2-7B graph's JSON, decompressed (shared by
//! `benches/hf_model.rs` and `benches/autoshard.rs`; the decompression is
//! outside their timings).

use std::io::Read;

pub fn text() -> String {
    let gz = include_bytes!("../../spmd-graph/graphs/hf/llama-2-7b.json.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("the committed graph decompresses");
    text
}
