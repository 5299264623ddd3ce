# kleidiai-rs as ggml-cpu's KleidiAI provider, for a CMake project that
# builds llama.cpp (or ggml) from source:
#
#   set(GGML_CPU_KLEIDIAI OFF)              # llama.cpp's own KleidiAI code and sources: not built
#   add_subdirectory(llama.cpp)
#   include(<kleidiai-rs>/kleidiai-capi/ggml/kleidiai-rs.cmake)
#   kleidiai_rs_attach(ggml-cpu <path>/libkleidiai_capi.a)
#
# libkleidiai_capi.a comes from
#   cargo build --release -p kleidiai-capi --target aarch64-unknown-linux-gnu
# and carries KleidiAI (once, its symbols renamed per kleidiai-rs version).
# kleidiai_rs_attach compiles the shim (ggml-kleidiai-rs.cpp) into the
# ggml-cpu target, defines GGML_USE_CPU_KLEIDIAI there (ggml-cpu then
# registers the KleidiAI extra buffer type the shim defines) and links the
# library. No file of llama.cpp is patched.

set(KLEIDIAI_RS_GGML_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(kleidiai_rs_attach target capi_lib)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "kleidiai_rs_attach: no target '${target}' (call it after add_subdirectory of llama.cpp or ggml)")
  endif()
  if(GGML_CPU_KLEIDIAI)
    message(FATAL_ERROR "kleidiai_rs_attach: set GGML_CPU_KLEIDIAI=OFF (kleidiai-rs replaces llama.cpp's own KleidiAI path; both would define it)")
  endif()
  if(NOT EXISTS "${capi_lib}")
    message(FATAL_ERROR "kleidiai_rs_attach: '${capi_lib}' does not exist; build it with: cargo build --release -p kleidiai-capi --target aarch64-unknown-linux-gnu")
  endif()
  target_sources(${target} PRIVATE "${KLEIDIAI_RS_GGML_DIR}/ggml-kleidiai-rs.cpp")
  target_include_directories(${target} PRIVATE "${KLEIDIAI_RS_GGML_DIR}/../include")
  target_compile_definitions(${target} PRIVATE GGML_USE_CPU_KLEIDIAI)
  # A Rust static library: its own dependencies on the C library follow it.
  target_link_libraries(${target} PRIVATE "${capi_lib}" gcc_s util rt pthread m dl)
endfunction()
