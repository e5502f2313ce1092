// KVCache: the keys and values of every past position, per layer, stored
// contiguously. Under the causal mask a token's K and V depend only on that
// token and the ones before it, so once written they never change; keeping
// them turns each decode step's projection work from O(pos) into O(1).
//
// Storage is in blocks of 16 positions (kLanes), the unit the attention
// kernel reads, so a contiguous cache and a paged one serve the same kernel:
//   K block: (n_kv_heads, head_dim, 16)   position-minor, so 16 scores are one vector
//   V block: (n_kv_heads, 16, head_dim)   position-major, so out += w_t * v_t is a vector op
// Layout of the whole cache: (n_layers, n_blocks, [K block | V block]).
//
// The element type S is the storage type (float, double, Eigen::bfloat16,
// Eigen::half); compute happens in T. Values are rounded to S when written.
#pragma once

#include <cstdint>
#include <cstring>

#include "kvdecode/config.hpp"
#include "kvdecode/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/kernels.hpp"

namespace kvd {

namespace detail {
/// Converts a compute value to the storage type (round to nearest even) and back.
template <class S, class T>
inline S to_storage(T x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else if constexpr (std::is_floating_point_v<S>) return static_cast<S>(x);
  else return S(static_cast<float>(x));
}
template <class T, class S>
inline T from_storage(S x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else return static_cast<T>(static_cast<float>(x));
}
}  // namespace detail

/// The shape a cache must agree with: layers, KV heads and head width.
struct CacheShape {
  int n_layers = 0, n_kv_heads = 0, head_dim = 0, max_seq_len = 0;
  static CacheShape of(const ModelConfig& c) { return {c.n_layers, c.n_kv_heads, c.head_dim, c.max_seq_len}; }
  bool operator==(const CacheShape& o) const {
    return n_layers == o.n_layers && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim && max_seq_len == o.max_seq_len;
  }
};

/// A contiguous KV cache for one sequence, holding up to capacity() positions.
/// T is the compute scalar, S the storage element type.
template <class T, class S = T>
class KVCache {
 public:
  using Scalar = T;
  using Storage = S;
  static constexpr int kBlock = detail::kLanes;  ///< positions per block

  /// A cache for `config`'s shape holding up to `capacity` positions (0 = max_seq_len).
  /// Allocates all capacity up front. Throws ConfigError if config is invalid or
  /// capacity is outside [1, max_seq_len].
  explicit KVCache(const ModelConfig& config, int capacity = 0) {
    config.validate();
    if (capacity == 0) capacity = config.max_seq_len;
    if (capacity < 1 || capacity > config.max_seq_len)
      throw ConfigError(detail::msg("KVCache capacity ", capacity, " must be in [1, max_seq_len = ", config.max_seq_len, "]"));
    shape_ = CacheShape::of(config);
    capacity_ = capacity;
    n_blocks_ = (capacity + kBlock - 1) / kBlock;
    block_elems_ = static_cast<long>(shape_.n_kv_heads) * shape_.head_dim * kBlock;  // one of K or V
    data_.resize(static_cast<std::size_t>(shape_.n_layers) * n_blocks_ * 2 * block_elems_);
  }

  KVCache(const KVCache&) = delete;             // big: copy explicitly with copy()
  KVCache& operator=(const KVCache&) = delete;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;

  /// An explicit deep copy (same shape, capacity, contents and length).
  KVCache copy() const {
    KVCache c;
    c.shape_ = shape_; c.capacity_ = capacity_; c.n_blocks_ = n_blocks_; c.block_elems_ = block_elems_; c.length_ = length_;
    c.data_.resize(data_.size());
    std::memcpy(static_cast<void*>(c.data_.data()), data_.data(), data_.size() * sizeof(S));
    return c;
  }

  const CacheShape& shape() const { return shape_; }
  int length() const { return length_; }      ///< positions stored: [0, length)
  int capacity() const { return capacity_; }  ///< most positions it can hold
  int first_position() const { return 0; }    ///< oldest position still stored
  DType dtype() const { return DTypeOf<S>::value; }

  /// Bytes one position takes: 2 (K, V) * n_layers * n_kv_heads * head_dim * sizeof(S).
  std::uint64_t bytes_per_token() const {
    return 2ull * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * sizeof(S);
  }
  std::uint64_t bytes_used() const { return bytes_per_token() * static_cast<std::uint64_t>(length_); }  ///< live positions
  std::uint64_t bytes_reserved() const { return static_cast<std::uint64_t>(data_.size()) * sizeof(S); }  ///< allocated

  /// Forgets every position (keeps the allocation).
  void clear() { length_ = 0; }

  /// Rewinds to `length` positions, dropping [length, this->length()).
  /// Throws CacheFullError (nothing changed) if length is outside [0, this->length()].
  void truncate(int length) {
    if (length < 0 || length > length_)
      throw CacheFullError(detail::msg("cannot truncate cache to ", length, " positions: it holds ", length_));
    length_ = length;
  }

  /// Appends one position: k and v are (n_layers, n_kv_heads * head_dim).
  /// Throws CacheFullError (nothing changed) when length() == capacity().
  void append(const T* k, const T* v) {
    check_room(1);
    const long kv_dim = static_cast<long>(shape_.n_kv_heads) * shape_.head_dim;
    for (int l = 0; l < shape_.n_layers; ++l) write(l, length_, k + l * kv_dim, v + l * kv_dim);
    length_ += 1;
  }

  /// K[layer][pos][kv_head][d] as T. Precondition (asserted): pos < length().
  T key(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= 0 && pos < length_);
    return detail::from_storage<T>(k_block(layer, pos / kBlock)[(kv_head * shape_.head_dim + d) * kBlock + pos % kBlock]);
  }
  /// V[layer][pos][kv_head][d] as T. Precondition (asserted): pos < length().
  T value(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= 0 && pos < length_);
    return detail::from_storage<T>(v_block(layer, pos / kBlock)[(kv_head * kBlock + pos % kBlock) * shape_.head_dim + d]);
  }

  // ---- The cache interface the forward pass uses; a paged cache implements the same ----
  // shape(), length(), capacity(), check_room(n), prepare_append(n), cancel_append(n),
  // write(layer, pos, k, v), commit_append(n), k_block(layer, b), v_block(layer, b).
  // Transformer::forward calls check_room on every cache, then prepare_append on each
  // (cancel_append on the ones already prepared if one throws), then write for every
  // layer and row, then commit_append. k_block/v_block take the absolute block index
  // b = pos / 16 and return the 16-position block holding positions [16b, 16b + 16).

  /// Throws CacheFullError (nothing changed) unless n more positions fit.
  void check_room(int n) const {
    if (n > capacity_ - length_)
      throw CacheFullError(detail::msg("KV cache full: appending ", n, " position(s) to ", length_,
                                       " would exceed its capacity of ", capacity_));
  }
  /// Makes positions [length, length + n) writable (contiguous: nothing to do). check_room(n) must hold.
  void prepare_append(int /*n*/) {}
  /// Writes one position's K and V (each n_kv_heads * head_dim) for one layer; pos < capacity.
  void write(int layer, int pos, const T* k, const T* v) {
    S* kb = k_block_mut(layer, pos / kBlock);
    S* vb = kb + block_elems_;
    const int lane = pos % kBlock, dh = shape_.head_dim;
    for (int h = 0; h < shape_.n_kv_heads; ++h)
      for (int d = 0; d < dh; ++d) {
        kb[(h * dh + d) * kBlock + lane] = detail::to_storage<S>(k[h * dh + d]);
        vb[(h * kBlock + lane) * dh + d] = detail::to_storage<S>(v[h * dh + d]);
      }
  }
  /// Undoes prepare_append(n) when a later cache of the same call could not make room.
  void cancel_append(int /*n*/) {}
  /// Makes n written positions part of the sequence.
  void commit_append(int n) { length_ += n; }
  /// K block b of a layer: (n_kv_heads, head_dim, 16).
  const S* k_block(int layer, int b) const {
    return data_.data() + (static_cast<std::size_t>(layer) * n_blocks_ + b) * 2 * block_elems_;
  }
  /// V block b of a layer: (n_kv_heads, 16, head_dim).
  const S* v_block(int layer, int b) const { return k_block(layer, b) + block_elems_; }

 private:
  KVCache() = default;
  S* k_block_mut(int layer, int b) { return const_cast<S*>(k_block(layer, b)); }

  CacheShape shape_;
  int capacity_ = 0, n_blocks_ = 0, length_ = 0;
  long block_elems_ = 0;
  detail::AlignedBuffer<S> data_;  // (n_layers, n_blocks, 2, block_elems)
};

}  // namespace kvd
