//! A bind's `tls.client_ca`, `tls.verify` and `tls.crl`: client certificates
//! (mutual TLS), checked by rustls' WebPKI verifier against the CAs and the
//! revocation lists, read when the config is.

use super::*;

impl Builder<'_> {
    /// The bind's client certificate checks, if it asks for them.
    pub(super) fn client_auth(&mut self, raw: &RawTls, key: &str) -> Option<Arc<ClientAuth>> {
        let Some(ca) = &raw.client_ca else {
            for (name, span) in
                [("verify", raw.verify.as_ref().map(Spanned::span)), ("crl", raw.crl.as_ref().map(Spanned::span))]
            {
                if let Some(span) = span {
                    self.err(span, format!("{key}.{name}"), format!("`{name}` goes with `client_ca`"));
                }
            }
            return None;
        };
        let required = match raw.verify.as_ref().map(|v| (v.get_ref().as_str(), v.span())) {
            None | Some(("required", _)) => true,
            Some(("optional", _)) => false,
            Some((other, span)) => {
                self.err(span, format!("{key}.verify"), format!("`{other}` is not \"required\" or \"optional\""));
                true
            }
        };
        let ca_file = self.base_dir().join(ca.get_ref());
        let roots = match tls::load_ca(&ca_file) {
            Ok(r) => r,
            Err(e) => {
                self.err(ca.span(), format!("{key}.client_ca"), e);
                return None;
            }
        };
        let mut crl_files = Vec::new();
        let mut crls = Vec::new();
        for (i, c) in raw.crl.as_ref().map(|l| &l.get_ref()[..]).unwrap_or_default().iter().enumerate() {
            let path = self.base_dir().join(c.get_ref());
            match tls::load_crls(&path) {
                Ok(mut list) => crls.append(&mut list),
                Err(e) => self.err(c.span(), format!("{key}.crl[{i}]"), e),
            }
            crl_files.push(path);
        }
        let provider = Arc::new(tls::provider());
        let mut builder =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).with_crls(crls);
        if !required {
            builder = builder.allow_unauthenticated();
        }
        let verifier = match builder.build() {
            Ok(v) => v,
            Err(e) => {
                self.err(ca.span(), format!("{key}.client_ca"), format!("{}: {e}", ca_file.display()));
                return None;
            }
        };
        let files: Vec<&Path> =
            std::iter::once(ca_file.as_path()).chain(crl_files.iter().map(PathBuf::as_path)).collect();
        let digest = tls::digest(&files, if required { "required" } else { "optional" });
        Some(Arc::new(ClientAuth { ca_file, crl_files, required, verifier, digest }))
    }
}
