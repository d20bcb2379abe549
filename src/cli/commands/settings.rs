//! `relay settings [--open]`: a one-time link into the Settings page, opened in the
//! default browser with `--open` (needs `api.listen`; docs/cli.md#verbs).

use std::process::{Command, Stdio};

use crate::cli::client::Client;
use crate::cli::Out;
use crate::wire;

pub fn link(c: &Client, open: bool) -> Result<Out, String> {
    let (link, v): (wire::LoginLink, _) = c.call_as("POST", "/api/login-code")?;
    if open {
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        Command::new(opener)
            .arg(&link.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{opener} {}: {e}", link.url))?;
    }
    Ok(Out::new(v, text(&link)))
}

fn text(link: &wire::LoginLink) -> String {
    format!("{}\n(one-time link, valid for 60 s)", link.url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_is_printed_with_how_long_it_lasts() {
        let link = wire::LoginLink {
            url: "http://127.0.0.1:7000/login?code=c0de".into(),
            expires_in_s: 60,
        };
        assert_eq!(
            text(&link),
            "http://127.0.0.1:7000/login?code=c0de\n(one-time link, valid for 60 s)"
        );
    }
}
