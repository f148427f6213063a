// Links libtilec.so (the C ABI, runtime/tilec.h), with an rpath so the program finds it when run.
// Where from, the first that applies:
//   $TILEC_LIB_DIR            a folder holding libtilec.so (a tilec build: scripts/test.sh passes build/)
//   pkg-config tilec          an installed tilec (cmake --install; PKG_CONFIG_PATH=PREFIX/lib/pkgconfig
//                             for a prefix pkg-config does not search by itself)
//   ../../build               the checkout's own build
fn main() {
    println!("cargo:rerun-if-env-changed=TILEC_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = match std::env::var("TILEC_LIB_DIR") {
        Ok(dir) => dir,
        Err(_) => installed_libdir().unwrap_or_else(|| "../../build".to_string()),
    };
    let dir = std::fs::canonicalize(&dir)
        .unwrap_or_else(|_| panic!("{dir}: no such folder (TILEC_LIB_DIR names a folder holding libtilec.so)"));
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=tilec");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}

// The libdir of pkg-config's tilec.pc, when pkg-config is here and finds it.
fn installed_libdir() -> Option<String> {
    let out = std::process::Command::new("pkg-config").args(["--variable=libdir", "tilec"]).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    if out.status.success() && !dir.is_empty() {
        Some(dir)
    } else {
        None
    }
}
