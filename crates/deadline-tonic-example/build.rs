//! Compiles `proto/chain.proto` with protox (a protobuf compiler written in Rust), so building
//! the example needs no `protoc` on the machine, and feeds the descriptors to tonic's
//! generator.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/chain.proto");
    let descriptors = protox::compile(["chain.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
