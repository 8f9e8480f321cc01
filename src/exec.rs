pub fn run(_c: &crate::config::Config, _a: &crate::cli::ExecArgs) -> anyhow::Result<u8> {
    todo!()
}
