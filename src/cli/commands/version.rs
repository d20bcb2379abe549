//! `relay version`: this program's version (the same as `relay --version`).

use serde_json::json;

use crate::cli::Out;

pub fn out() -> Out {
    let version = env!("CARGO_PKG_VERSION");
    Out::new(json!({ "version": version }), format!("relay {version}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_packages() {
        let out = out();
        assert_eq!(out.text, format!("relay {}", env!("CARGO_PKG_VERSION")));
        assert_eq!(out.json, json!({"version": env!("CARGO_PKG_VERSION")}));
        assert!(out.raw.is_none());
    }
}
