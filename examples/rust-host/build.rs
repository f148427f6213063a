// Links libtilec.so (the C ABI, runtime/tilec.h) from $TILEC_LIB_DIR (a tilec build folder:
// scripts/test.sh passes build/), with an rpath so the program finds it when run.
fn main() {
    println!("cargo:rerun-if-env-changed=TILEC_LIB_DIR");
    let dir = std::env::var("TILEC_LIB_DIR").unwrap_or_else(|_| "../../build".to_string());
    let dir = std::fs::canonicalize(&dir).unwrap_or_else(|_| panic!("TILEC_LIB_DIR={dir}: no such folder (a tilec build holding libtilec.so)"));
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=tilec");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
