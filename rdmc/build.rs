//! Build script: with the `ofi` feature, compile the libfabric shim
//! (`src/transport/ofi/shim.c`) and link libfabric. Without it, nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ofi")]
    ofi::build();
}

#[cfg(feature = "ofi")]
mod ofi {
    pub(super) fn build() {
        println!("cargo:rerun-if-changed=src/transport/ofi/shim.c");
        println!("cargo:rerun-if-env-changed=DOCS_RS");
        // docs.rs documents the feature without libfabric: documentation
        // needs no shim and links nothing.
        if std::env::var_os("DOCS_RS").is_some() {
            return;
        }
        let mut cc = cc::Build::new();
        cc.file("src/transport/ofi/shim.c").warnings(true);
        // `pkg-config libfabric` gives the headers and the link flags;
        // without a .pc file, the library is assumed on the default paths.
        // The flags are emitted after the shim, which needs libfabric.
        let library = pkg_config::Config::new()
            .cargo_metadata(false)
            .probe("libfabric");
        if let Ok(library) = &library {
            cc.includes(&library.include_paths);
        }
        cc.compile("rdmc_ofi_shim");
        match library {
            Ok(library) => {
                for dir in library.link_paths {
                    println!("cargo:rustc-link-search=native={}", dir.display());
                }
                for lib in library.libs {
                    println!("cargo:rustc-link-lib={lib}");
                }
            }
            Err(e) => {
                println!("cargo:warning=pkg-config found no libfabric ({e}); linking -lfabric");
                println!("cargo:rustc-link-lib=fabric");
            }
        }
    }
}
