// The cache interface the forward pass uses, as a checked trait.
//
// Transformer::forward takes any cache type with these members (KVCache and
// PagedSequence have them; a user type may too):
//   shape() -> CacheShape            length(), capacity() -> int
//   check_room(int n)                throws CacheFullError (nothing changed) unless n more fit
//   prepare_append(int n)            makes [length, length + n) writable; may throw (nothing changed)
//   cancel_append(int n)             undoes prepare_append(n)
//   write(layer, pos, const T* k, const T* v)   one position's K and V (n_kv_heads * head_dim each)
//   commit_append(int n)             makes the n written positions part of the sequence
//   k_block(layer, b), v_block(layer, b) -> const pointer to 16-position block b = pos / 16
// forward calls check_room on every cache, then prepare_append on each
// (cancel_append on those already prepared if one throws), then write for
// every layer and row, then commit_append.
//
// A type that lacks a member fails to compile with one static_assert naming
// that member, not with pages of template errors from inside the kernels.
#pragma once

#include <type_traits>
#include <utility>

#include "kvdecode/cache/kv_cache.hpp"  // CacheShape

namespace kvd {
namespace detail {
template <class...>
using cache_void_t = void;

#define KVDECODE_CACHE_MEMBER_TRAIT(name, expr)                                                   \
  template <class C, class T, class = void>                                                       \
  struct cache_has_##name : std::false_type {};                                                   \
  template <class C, class T>                                                                     \
  struct cache_has_##name<C, T, cache_void_t<decltype(expr)>> : std::true_type {};

KVDECODE_CACHE_MEMBER_TRAIT(shape, static_cast<CacheShape>(std::declval<const C&>().shape()))
KVDECODE_CACHE_MEMBER_TRAIT(length, static_cast<int>(std::declval<const C&>().length()))
KVDECODE_CACHE_MEMBER_TRAIT(capacity, static_cast<int>(std::declval<const C&>().capacity()))
KVDECODE_CACHE_MEMBER_TRAIT(check_room, std::declval<const C&>().check_room(1))
KVDECODE_CACHE_MEMBER_TRAIT(prepare_append, std::declval<C&>().prepare_append(1))
KVDECODE_CACHE_MEMBER_TRAIT(cancel_append, std::declval<C&>().cancel_append(1))
KVDECODE_CACHE_MEMBER_TRAIT(write, std::declval<C&>().write(0, 0, std::declval<const T*>(), std::declval<const T*>()))
KVDECODE_CACHE_MEMBER_TRAIT(commit_append, std::declval<C&>().commit_append(1))
KVDECODE_CACHE_MEMBER_TRAIT(k_block, *std::declval<const C&>().k_block(0, 0))
KVDECODE_CACHE_MEMBER_TRAIT(v_block, *std::declval<const C&>().v_block(0, 0))
#undef KVDECODE_CACHE_MEMBER_TRAIT
}  // namespace detail

/// True when Cache has every member of the cache interface above for compute type T.
template <class Cache, class T>
inline constexpr bool is_kv_cache_v =
    detail::cache_has_shape<Cache, T>::value && detail::cache_has_length<Cache, T>::value &&
    detail::cache_has_capacity<Cache, T>::value && detail::cache_has_check_room<Cache, T>::value &&
    detail::cache_has_prepare_append<Cache, T>::value && detail::cache_has_cancel_append<Cache, T>::value &&
    detail::cache_has_write<Cache, T>::value && detail::cache_has_commit_append<Cache, T>::value &&
    detail::cache_has_k_block<Cache, T>::value && detail::cache_has_v_block<Cache, T>::value;

namespace detail {
/// One static_assert per member, so that the error names what is missing. Always true when it compiles.
template <class Cache, class T>
constexpr bool check_cache_interface() {
  static_assert(cache_has_shape<Cache, T>::value, "cache type lacks shape() -> CacheShape (see cache_interface.hpp)");
  static_assert(cache_has_length<Cache, T>::value, "cache type lacks length() -> int (see cache_interface.hpp)");
  static_assert(cache_has_capacity<Cache, T>::value, "cache type lacks capacity() -> int (see cache_interface.hpp)");
  static_assert(cache_has_check_room<Cache, T>::value, "cache type lacks check_room(int) const (see cache_interface.hpp)");
  static_assert(cache_has_prepare_append<Cache, T>::value, "cache type lacks prepare_append(int) (see cache_interface.hpp)");
  static_assert(cache_has_cancel_append<Cache, T>::value, "cache type lacks cancel_append(int) (see cache_interface.hpp)");
  static_assert(cache_has_write<Cache, T>::value,
                "cache type lacks write(int layer, int pos, const T* k, const T* v) (see cache_interface.hpp)");
  static_assert(cache_has_commit_append<Cache, T>::value, "cache type lacks commit_append(int) (see cache_interface.hpp)");
  static_assert(cache_has_k_block<Cache, T>::value, "cache type lacks k_block(int, int) const (see cache_interface.hpp)");
  static_assert(cache_has_v_block<Cache, T>::value, "cache type lacks v_block(int, int) const (see cache_interface.hpp)");
  return true;
}
}  // namespace detail
}  // namespace kvd
