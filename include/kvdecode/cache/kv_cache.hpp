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
// The storage types are S for keys and SV (default S) for values: float, double,
// Eigen::bfloat16, Eigen::half, or the block types CacheQ8_0 / CacheQ4_0 (32
// values along the head dimension per f16 scale; kv_quant.hpp); compute happens
// in T. Values are rounded to the storage type when written, and every reader
// sees the stored value.
//
// With a sliding window (config.sliding_window = W > 0) a row attends to the
// last W positions only, so the cache keeps only those: a ring of blocks, block
// b living in slot b % ring_blocks. The ring also has room for the rows of one
// call (max_append() positions), because every row of a call writes its K and V
// before any row reads; Transformer::prefill splits longer prompts into chunks,
// which is exact.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kvdecode/core/config.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/cache/kv_quant.hpp"

namespace kvd {

namespace detail {
/// a * b for a cache size, or ConfigError naming `what` if the product does not fit in
/// size_t. ModelConfig::validate() already bounds every product a valid config forms;
/// this keeps each size formed in the caches checked where it is formed.
inline std::size_t cache_size_mul(std::size_t a, std::size_t b, const char* what) {
  std::size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw ConfigError(msg(what, ": ", a, " x ", b, " overflows size_t (limit ", static_cast<std::size_t>(-1), ")"));
  return r;
}
}  // namespace detail

/// The shape a cache must agree with: layers, KV heads and head width.
struct CacheShape {
  int n_layers = 0, n_kv_heads = 0, head_dim = 0, max_seq_len = 0;
  int sliding_window = 0;  ///< 0 = every past position is kept
  static CacheShape of(const ModelConfig& c) {
    return {c.n_layers, c.n_kv_heads, c.head_dim, c.max_seq_len, c.sliding_window};
  }
  bool operator==(const CacheShape& o) const {
    return n_layers == o.n_layers && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim &&
           max_seq_len == o.max_seq_len && sliding_window == o.sliding_window;
  }
  bool operator!=(const CacheShape& o) const { return !(*this == o); }
};

/// A contiguous KV cache for one sequence, holding up to capacity() positions.
/// T is the compute scalar, S the keys' storage type and SV the values'.
template <class T, class S = T, class SV = S>
class KVCache {
 public:
  using Scalar = T;
  using Storage = S;        ///< keys
  using ValueStorage = SV;  ///< values
  using KRef = typename detail::KVStore<S>::KRef;   ///< what k_block() returns
  using VRef = typename detail::KVStore<SV>::VRef;  ///< what v_block() returns
  static constexpr int kBlock = detail::kLanes;  ///< positions per block

  /// Default rows per call for a sliding-window cache (longer prefills are split).
  static constexpr int kDefaultWindowChunk = 64;

  /// A cache for `config`'s shape holding up to `capacity` positions (0 = max_seq_len).
  /// Allocates everything up front: capacity positions, or with a sliding window W
  /// only a ring of W + max_append positions (rounded up to blocks), where
  /// max_append (0 = kDefaultWindowChunk) is the most positions one call may append.
  /// Throws ConfigError if config is invalid, capacity is outside [1, max_seq_len],
  /// max_append is negative, a block type (q8_0, q4_0) meets a head_dim that is not
  /// a multiple of 32, or a size overflows; std::bad_alloc if the memory is not there.
  explicit KVCache(const ModelConfig& config, int capacity = 0, int max_append = 0) {
    config.validate();
    detail::KVStore<S>::check_head_dim(config.head_dim, "KVCache keys");
    detail::KVStore<SV>::check_head_dim(config.head_dim, "KVCache values");
    if (capacity == 0) capacity = config.max_seq_len;
    if (capacity < 1 || capacity > config.max_seq_len)
      throw ConfigError(detail::msg("KVCache capacity ", capacity, " must be in [1, max_seq_len = ", config.max_seq_len, "]"));
    if (max_append < 0) throw ConfigError(detail::msg("KVCache max_append ", max_append, " must be >= 0"));
    shape_ = CacheShape::of(config);
    capacity_ = capacity;
    const int all_blocks = (capacity + kBlock - 1) / kBlock;
    if (shape_.sliding_window > 0) {
      max_append_ = std::min(capacity, max_append > 0 ? max_append : kDefaultWindowChunk);
      // Positions one call may touch: the window of its first row up to its last row.
      const int span = shape_.sliding_window + max_append_ - 1;
      n_blocks_ = std::min(all_blocks, (span + kBlock - 1) / kBlock + 1);
    } else {
      max_append_ = capacity;
      n_blocks_ = all_blocks;
    }
    using detail::cache_size_mul;
    const std::size_t block_elems = cache_size_mul(
        cache_size_mul(static_cast<std::size_t>(shape_.n_kv_heads), static_cast<std::size_t>(shape_.head_dim),
                       "KVCache n_kv_heads x head_dim"),
        kBlock, "KVCache block elements");  // one of K or V
    cache_size_mul(block_elems, 8, "KVCache block bytes");
    k_bytes_ = detail::KVStore<S>::bytes(block_elems);
    v_bytes_ = detail::KVStore<SV>::bytes(block_elems);
    const std::size_t layer_bytes = cache_size_mul(static_cast<std::size_t>(n_blocks_), k_bytes_ + v_bytes_, "KVCache bytes per layer");
    const std::size_t bytes = cache_size_mul(static_cast<std::size_t>(shape_.n_layers), layer_bytes, "KVCache bytes");
    block_elems_ = static_cast<long>(block_elems);
    data_.resize(bytes);
  }

  KVCache(const KVCache&) = delete;             // big: copy explicitly with copy()
  KVCache& operator=(const KVCache&) = delete;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;

  /// An explicit deep copy (same shape, capacity, contents and length).
  KVCache copy() const {
    KVCache c;
    c.shape_ = shape_; c.capacity_ = capacity_; c.n_blocks_ = n_blocks_; c.block_elems_ = block_elems_; c.length_ = length_;
    c.k_bytes_ = k_bytes_; c.v_bytes_ = v_bytes_;
    c.max_append_ = max_append_; c.high_water_ = high_water_; c.restored_first_ = restored_first_;
    c.data_.resize(data_.size());
    std::memcpy(static_cast<void*>(c.data_.data()), data_.data(), data_.size());
    return c;
  }

  const CacheShape& shape() const { return shape_; }
  int length() const { return length_; }      ///< positions stored: [0, length)
  int capacity() const { return capacity_; }  ///< most positions the sequence can reach
  int max_append() const { return max_append_; }  ///< most positions one call may append
  int sliding_window() const { return shape_.sliding_window; }
  /// Oldest position a future row can attend to (0 without a sliding window).
  int first_position() const { return detail::first_visible(length_, shape_.sliding_window); }
  int stored_positions() const { return n_blocks_ * kBlock; }  ///< positions the allocation holds
  DType dtype() const { return DTypeOf<S>::value; }         ///< the keys' storage type
  DType value_dtype() const { return DTypeOf<SV>::value; }  ///< the values' storage type

  /// Bytes one position takes: n_layers * n_kv_heads * (bytes of head_dim keys + of head_dim values).
  std::uint64_t bytes_per_token() const {
    return static_cast<std::uint64_t>(shape_.n_layers) * shape_.n_kv_heads *
           (dtype_bytes_for(DTypeOf<S>::value, shape_.head_dim) + dtype_bytes_for(DTypeOf<SV>::value, shape_.head_dim));
  }
  std::uint64_t bytes_used() const { return bytes_per_token() * static_cast<std::uint64_t>(length_); }  ///< live positions
  std::uint64_t bytes_reserved() const { return static_cast<std::uint64_t>(data_.size()); }  ///< allocated

  /// Forgets every position (keeps the allocation).
  void clear() { length_ = 0; high_water_ = 0; restored_first_ = 0; }

  /// Rewinds to `length` positions, dropping [length, this->length()).
  /// Throws CacheFullError (nothing changed) if length is outside [0, this->length()],
  /// or, with a sliding window, if positions the rewound sequence would attend to
  /// have already been overwritten in the ring.
  void truncate(int length) {
    if (length < 0 || length > length_)
      throw CacheFullError(detail::msg("cannot truncate cache to ", length, " positions: it holds ", length_));
    if (shape_.sliding_window > 0 && length > 0) {
      const int oldest_needed = detail::first_visible(length, shape_.sliding_window);
      if (oldest_resident() > oldest_needed)
        throw CacheFullError(detail::msg("cannot rewind this sliding-window cache to ", length,
                                         " positions: position ", oldest_needed, " was overwritten; the oldest kept is ",
                                         oldest_resident()));
    }
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

  /// K[layer][pos][kv_head][d] as T. Precondition (asserted): first_position() <= pos < length().
  T key(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= oldest_resident() && pos < length_);
    return detail::from_storage<T>(k_block(layer, pos / kBlock)[(kv_head * shape_.head_dim + d) * kBlock + pos % kBlock]);
  }
  /// V[layer][pos][kv_head][d] as T. Precondition (asserted): first_position() <= pos < length().
  T value(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= oldest_resident() && pos < length_);
    return detail::from_storage<T>(v_block(layer, pos / kBlock)[(kv_head * kBlock + pos % kBlock) * shape_.head_dim + d]);
  }

  // ---- The cache interface the forward pass uses (cache_interface.hpp, checked
  // there by is_kv_cache_v); a paged cache implements the same. k_block/v_block take
  // the absolute block index b = pos / 16 and return the 16-position block holding
  // positions [16b, 16b + 16). ----

  /// Throws CacheFullError (nothing changed) unless n more positions fit, in one call.
  void check_room(int n) const {
    if (n > capacity_ - length_)
      throw CacheFullError(detail::msg("KV cache full: appending ", n, " position(s) to ", length_,
                                       " would exceed its capacity of ", capacity_));
    if (n > max_append_)
      throw CacheFullError(detail::msg("sliding-window cache: appending ", n, " positions in one call exceeds its max_append of ",
                                       max_append_, " (Transformer::prefill splits longer prompts itself)"));
  }
  /// Makes positions [length, length + n) writable (contiguous: nothing to do). check_room(n) must hold.
  void prepare_append(int /*n*/) {}
  /// Writes one position's K and V (each n_kv_heads * head_dim) for one layer; pos < capacity.
  void write(int layer, int pos, const T* k, const T* v) {
    std::uint8_t* kb = block_bytes(layer, pos / kBlock);
    detail::KVStore<S>::store_k(kb, block_elems_, pos % kBlock, k, shape_.n_kv_heads, shape_.head_dim);
    detail::KVStore<SV>::store_v(kb + k_bytes_, block_elems_, pos % kBlock, v, shape_.n_kv_heads, shape_.head_dim);
  }
  /// Undoes prepare_append(n) when a later cache of the same call could not make room.
  void cancel_append(int /*n*/) {}
  /// Oldest position whose K and V are still held: 0, or with a sliding window the
  /// oldest one the ring has not overwritten (or that a restore brought back).
  int oldest_resident() const {
    const int newest_block = high_water_ > 0 ? (high_water_ - 1) / kBlock : 0;
    return std::max(restored_first_, std::max(0, (newest_block - n_blocks_ + 1) * kBlock));
  }
  /// After a restore wrote positions [first, length) with write(): makes them the
  /// sequence, with nothing older held. Preconditions (asserted): 0 <= first <= length <= capacity.
  void commit_restored(int first, int length) {
    KVD_ASSERT(0 <= first && first <= length && length <= capacity_);
    length_ = high_water_ = length;
    restored_first_ = first;
  }
  /// Makes n written positions part of the sequence.
  void commit_append(int n) {
    length_ += n;
    high_water_ = std::max(high_water_, length_);
  }
  /// K block b of a layer: (n_kv_heads, head_dim, 16). With a sliding window the
  /// block lives in ring slot b % n_blocks.
  KRef k_block(int layer, int b) const {
    return detail::KVStore<S>::k_ref(block_bytes(layer, b), block_elems_);
  }
  /// V block b of a layer: (n_kv_heads, 16, head_dim).
  VRef v_block(int layer, int b) const { return detail::KVStore<SV>::v_ref(block_bytes(layer, b) + k_bytes_, block_elems_); }

 private:
  KVCache() = default;
  // The bytes of block b's pair [K block | V block] in a layer.
  const std::uint8_t* block_bytes(int layer, int b) const {
    return data_.data() + (static_cast<std::size_t>(layer) * n_blocks_ + b % n_blocks_) * (k_bytes_ + v_bytes_);
  }
  std::uint8_t* block_bytes(int layer, int b) { return data_.data() + (static_cast<std::size_t>(layer) * n_blocks_ + b % n_blocks_) * (k_bytes_ + v_bytes_); }

  CacheShape shape_;
  int capacity_ = 0, n_blocks_ = 0, length_ = 0, max_append_ = 0;
  int high_water_ = 0;  // most positions ever committed since the last clear (what the ring has overwritten)
  int restored_first_ = 0;  // oldest position a restore brought back (older ones were never written)
  long block_elems_ = 0;                // values in one K or V block: n_kv_heads * head_dim * 16
  std::size_t k_bytes_ = 0, v_bytes_ = 0;  // bytes of one K block, one V block
  detail::AlignedBuffer<std::uint8_t> data_;  // (n_layers, n_blocks, [K block | V block]) bytes
};

}  // namespace kvd
