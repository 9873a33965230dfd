//! Build script: with the `ofi` feature, compile the libfabric shim
//! (`src/transport/ofi/shim.c`) and link libfabric. Without it, nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ofi")]
    ofi::build();
}

#[cfg(feature = "ofi")]
mod ofi {
    use std::process::Command;

    /// Compiler and linker flags from `pkg-config libfabric`, if it knows it.
    fn pkg_config(arg: &str) -> Option<Vec<String>> {
        let out = Command::new("pkg-config")
            .args([arg, "libfabric"])
            .output()
            .ok()?;
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
    }

    pub(super) fn build() {
        println!("cargo:rerun-if-changed=src/transport/ofi/shim.c");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
        let mut cc = cc::Build::new();
        cc.file("src/transport/ofi/shim.c").warnings(true);
        for flag in pkg_config("--cflags").unwrap_or_default() {
            match flag.strip_prefix("-I") {
                Some(dir) => cc.include(dir),
                None => cc.flag(&flag),
            };
        }
        cc.compile("rdmc_ofi_shim");
        let libs = pkg_config("--libs").unwrap_or_else(|| vec!["-lfabric".to_owned()]);
        for flag in libs {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            } else if let Some(lib) = flag.strip_prefix("-l") {
                println!("cargo:rustc-link-lib={lib}");
            }
        }
    }
}
