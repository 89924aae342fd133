//! The counting global allocator for the heap tests (cache_heap.rs, perobj_heap.rs,
//! process_table_heap.rs): each test binary that declares `mod common;` counts every allocation
//! of its process. One test per binary, so nothing else allocates meanwhile.
pub use sandbox_memory::counting::live;

#[global_allocator]
static GLOBAL: sandbox_memory::counting::Counting = sandbox_memory::counting::Counting;
