//! `relay-shim exec …`: the steps are in the shim crate (`shim/src/lib.rs`). Built by the
//! root package so that `cargo install --path .` installs it beside `relay`.

fn main() {
    relay_shim::run()
}
