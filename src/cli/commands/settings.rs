//! `relay settings [--open]`: a one-time link into the Settings page, opened in the
//! default browser with `--open` (needs `api.listen`; docs/cli.md#verbs).
//! `relay settings schema`: settings.json's JSON Schema on stdout, needing no config dir
//! (docs/settings.md#an-editor-checks-it).

use std::process::{Command, ExitCode, Stdio};

use crate::cli::client::Client;
use crate::cli::{emit, Out};
use crate::wire;

pub fn schema() -> ExitCode {
    emit(
        crate::daemon::settings::schema_text().as_bytes(),
        ExitCode::SUCCESS,
    )
}

pub fn link(c: &Client, open: bool) -> Result<Out, String> {
    let (link, v): (wire::LoginLink, _) = c.call_as("POST", "/api/login-code")?;
    if open {
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        let ran = Command::new(opener)
            .arg(&link.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|mut child| opener_end(&mut child));
        if let Some(note) = not_opened(opener, ran) {
            eprintln!("{note}");
        }
    }
    Ok(Out::new(v, text(&link)))
}

/// How long the opener is given to say it failed: `xdg-open` hands the link to the
/// browser and exits; one still running then is taken to be opening it.
const OPENER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The opener's exit within [`OPENER_WAIT`], or `None` while it still runs.
fn opener_end(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + OPENER_WAIT;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if std::time::Instant::now() < deadline => {}
            _ => return None,
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// What `--open` says when no browser opened (issue 40: it was silent): the opener
/// missing, or its failure; `None` when it opened (or is still opening).
fn not_opened(
    opener: &str,
    ran: std::io::Result<Option<std::process::ExitStatus>>,
) -> Option<String> {
    let why = match ran {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("{opener} is not on the PATH")
        }
        Err(e) => format!("{opener} could not run: {e}"),
        Ok(Some(st)) if !st.success() => match st.code() {
            Some(code) => format!("{opener} exited with status {code}"),
            None => format!("{opener} was killed"),
        },
        Ok(_) => return None,
    };
    Some(format!(
        "relay: no browser opened ({why}): open the link above in a browser yourself"
    ))
}

fn text(link: &wire::LoginLink) -> String {
    format!("{}\n(one-time link, valid for 60 s)", link.url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opener_that_fails_or_is_missing_is_said_and_one_that_opens_is_not() {
        use std::os::unix::process::ExitStatusExt;
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(
            not_opened("xdg-open", Err(missing)).unwrap(),
            "relay: no browser opened (xdg-open is not on the PATH): open the link above in \
             a browser yourself"
        );
        let failed = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(
            not_opened("xdg-open", Ok(Some(failed))).unwrap(),
            "relay: no browser opened (xdg-open exited with status 3): open the link above \
             in a browser yourself"
        );
        let ok = std::process::ExitStatus::from_raw(0);
        assert_eq!(not_opened("open", Ok(Some(ok))), None);
        assert_eq!(not_opened("open", Ok(None)), None);
    }

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
