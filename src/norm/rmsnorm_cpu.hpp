// Knobs of the CPU fallback that tests need; the fallback itself is declared in
// rmsnorm_internal.hpp.
#pragma once

namespace normkit::norm::detail {

// Forces the CPU fallback to use exactly `threads` worker threads (capped by the
// number of row blocks); 0 restores the automatic choice. Process-wide, meant for
// tests proving that results do not depend on the thread count.
void set_cpu_threads_for_testing(int threads);

}  // namespace normkit::norm::detail
