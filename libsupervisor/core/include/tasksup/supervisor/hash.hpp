#pragma once

#include <cstddef>

namespace tasksup {

/// Mixes the hash `x` into `seed` (boost::hash_combine's scheme with the
/// 64-bit golden-ratio constant), for hashes over several fields.
inline void hash_combine(std::size_t& seed, std::size_t x) noexcept {
  seed ^= x + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

} // namespace tasksup
