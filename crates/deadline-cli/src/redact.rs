//! Connection URLs as the command prints them: without their password.

/// `url` with its password replaced by `***` (`amqp://guest:***@host`), for printing. The
/// last `@` ends the credentials: a password may hold one too.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            redacted("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redacted("amqp://127.0.0.1"), "amqp://127.0.0.1");
        assert_eq!(redacted("nonsense"), "nonsense");
        assert_eq!(
            redacted("postgres://app:p@ss@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
    }
}
