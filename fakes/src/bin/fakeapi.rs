//! `fakeapi`: an Anthropic API stand-in for relay's tests. See `relay_fakes::api`.

fn main() {
    relay_fakes::api::run()
}
