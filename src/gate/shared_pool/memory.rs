//! Part `memory`: physical KV cells for N agents with sharing on and off.

use anyhow::{ensure, Result};
use std::collections::BTreeMap;

use super::*;

impl Job<'_> {
    pub(super) fn memory(&self, p: usize, s: usize, n: usize) -> Result<Figures> {
        // Sharing on: the pool, then N agents at once (one token each: nothing generated enters the cache).
        let server = self.server(self.c)?;
        let port = server.port();
        let (_, doc) = document(&server, self.text, p)?;
        let suffixes: Vec<Vec<i64>> = (0..n)
            .map(|i| suffix(&server, i, s))
            .collect::<Result<_>>()?;
        fill_pool(port, POOL, &doc)?;
        let bodies = suffixes
            .iter()
            .enumerate()
            .map(|(i, sfx)| ask(&cat(&doc, sfx), 1, i + 1, Some(p)))
            .collect();
        let replies = concurrently(port, bodies)?;
        for r in &replies {
            ensure!(
                r["timings"]["cache_n"].as_u64() == Some(p as u64)
                    && r["timings"]["prompt_n"].as_u64() == Some(s as u64),
                "a sharing agent did not start from the pool: timings {}",
                r["timings"]
            );
        }
        let on = metrics(port)?;
        drop(server);
        // Sharing off: a fresh server, the same N prompts.
        let server = self.server(self.c)?;
        let port = server.port();
        let bodies = suffixes
            .iter()
            .enumerate()
            .map(|(i, sfx)| in_slot(&cat(&doc, sfx), 1, i + 1))
            .collect();
        concurrently(port, bodies)?;
        let off = metrics(port)?;
        drop(server);
        let bytes_per_cell = on["kv_bytes"] / on["kv_cells"].max(1.0);
        let mib = |cells: f64| cells * bytes_per_cell / (1024.0 * 1024.0);
        let (p, s, nf) = (p as f64, s as f64, n as f64);
        let want_on = p + nf * s;
        let want_off = nf * (p + s);
        let exact = on["kv_cells_used"] == want_on && off["kv_cells_used"] == want_off;
        Ok(BTreeMap::from([
            ("agents".into(), nf),
            ("p_tokens".into(), p),
            ("s_tokens".into(), s),
            ("cells_shared".into(), on["kv_cells_used"]),
            ("cells_shared_expected".into(), want_on),
            ("refs_shared".into(), on["kv_cell_refs"]),
            ("cells_unshared".into(), off["kv_cells_used"]),
            ("cells_unshared_expected".into(), want_off),
            ("cells_exact".into(), exact as u8 as f64),
            ("mib_shared".into(), mib(on["kv_cells_used"])),
            ("mib_unshared".into(), mib(off["kv_cells_used"])),
            (
                "ratio".into(),
                off["kv_cells_used"] / on["kv_cells_used"].max(1.0),
            ),
        ]))
    }
}
