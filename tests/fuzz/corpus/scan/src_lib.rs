// A transfer retried on failure: the retry may send a second POST after the
// first one succeeded but its answer was lost.
use rmcp::tool;

pub struct Bank<'a> {
    client: &'a reqwest::Client,
}

impl<'a> Bank<'a> {
    #[tool(description = "Transfers money to a payee.")]
    async fn transfer(&self, payee: String, cents: u64) -> Result<String, String> {
        let separator = '/';
        for attempt in 0..3 {
            let url = format!("https://bank.example{}transfers", separator);
            match self.client.post(url).body(format!("{payee}:{cents}")).send().await {
                Ok(r) => return Ok(r.status().to_string()),
                Err(e) if attempt < 2 => eprintln!("transfer failed ({e}), retrying"),
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(r#"unreachable "quoted" text"#.to_string())
    }

    #[tool(description = "Lists the recent transfers.")]
    async fn list_transfers(&self) -> Result<String, String> {
        Ok(String::new())
    }
}
