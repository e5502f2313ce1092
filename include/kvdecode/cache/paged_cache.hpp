// Paged KV cache (as in vLLM's PagedAttention): one BlockPool of fixed-size
// blocks, allocated once, shared by many sequences; each PagedSequence maps
// its positions to pool blocks through a block table. A sequence takes a block
// only when it reaches it, so memory follows the live tokens instead of every
// sequence reserving max_seq_len, and fork() shares a common prefix between
// sequences by reference count instead of copying it.
//
// A pool block of block_size tokens (a multiple of 16) is block_size / 16
// consecutive 16-position sub-blocks per layer, each laid out exactly as a
// KVCache block (see kv_cache.hpp):
//   K sub-block: (n_kv_heads, head_dim, 16)   position-minor
//   V sub-block: (n_kv_heads, 16, head_dim)   position-major
//   pool:        (n_blocks, n_layers, block_size / 16, [K sub-block | V sub-block])
// The attention kernel reads every cache through k_block(layer, b) /
// v_block(layer, b) for the 16 positions [16b, 16b + 16), so a paged sequence
// hands it the same values in the same layout as a contiguous cache and the
// logits are bit-identical wherever the blocks sit in the pool. Reads go
// straight to the pool (no gather); each sequence keeps one pointer per 16
// positions beside its block table, so a read is one look-up.
//
// Running out. Blocks are taken in prepare_append, before anything is written.
// When the pool cannot supply them it throws OutOfBlocksError (a
// CacheFullError) with the sequence unchanged, and Transformer::forward then
// cancels the sequences of the call it had already prepared: a batch that does
// not fit changes no sequence, no block table and no reference count.
//
// Sharing. fork() gives a second sequence the same table, every block's
// reference count + 1. Sequences only append, so a full shared block is never
// written again and stays shared; the first append into a shared, partly
// filled last block copies that block first (copy-on-write), leaving the other
// holders' data untouched.
//
// Lifetimes. The pool must outlive its sequences. Neither class is thread-safe:
// calls that change a pool or any of its sequences must not overlap (concurrent
// reads of k_block/v_block, as the attention kernel does, are fine).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kvdecode/core/config.hpp"
#include "kvdecode/core/dtype.hpp"
#include "kvdecode/error.hpp"
#include "kvdecode/core/parallel.hpp"
#include "kvdecode/core/simd.hpp"
#include "kvdecode/cache/kv_cache.hpp"

namespace kvd {

template <class T, class S, class SV>
class PagedSequence;

/// A snapshot of a pool's memory use. "Live" tokens are the distinct token
/// slots some sequence can read: a prefix shared by forks is stored once and
/// counted once, so tokens_resident <= tokens_stored.
struct PoolStats {
  int block_size = 0;                  ///< tokens per block
  long blocks_total = 0;               ///< blocks in the pool
  long blocks_in_use = 0;              ///< blocks held by at least one sequence
  long blocks_shared = 0;              ///< blocks held by two or more sequences
  long sequences = 0;                  ///< live sequences of this pool
  std::uint64_t tokens_stored = 0;     ///< sum of live sequence lengths (shared prefixes once per sequence)
  std::uint64_t tokens_resident = 0;   ///< distinct token slots holding live tokens (shared prefixes once)
  std::uint64_t bytes_reserved = 0;    ///< blocks_total * bytes per block: what the pool allocated
  std::uint64_t bytes_in_use = 0;      ///< blocks_in_use * bytes per block
  std::uint64_t bytes_live = 0;        ///< tokens_resident * bytes per token
  double live_fraction = 0;            ///< bytes_live / bytes_reserved
  double live_fraction_in_use = 0;     ///< bytes_live / bytes_in_use (0 when no block is in use): 1 - tail waste
};

/// A fixed pool of KV blocks for one model shape, shared by many PagedSequences.
/// T is the compute scalar, S the keys' storage type and SV the values' (kv_cache.hpp, KVStore).
template <class T, class S = T, class SV = S>
class BlockPool {
 public:
  using Scalar = T;
  using Storage = S;        ///< keys
  using ValueStorage = SV;  ///< values
  static constexpr int kSubBlock = detail::kLanes;  ///< positions per sub-block (the attention kernel's unit)

  /// A pool of `n_blocks` blocks of `block_size` tokens for `config`'s shape,
  /// allocated (and zeroed) here, once. Throws ConfigError if config is invalid,
  /// block_size is not a positive multiple of 16 or exceeds max_seq_len rounded
  /// up to 16 (a block longer than any sequence only wastes memory), n_blocks < 1, or
  /// a block type (q8_0, q4_0) meets a head_dim that is not a multiple of 32, or
  /// the pool's size (n_blocks x bytes per block) overflows size_t; std::bad_alloc if
  /// the memory is not there.
  BlockPool(const ModelConfig& config, int n_blocks, int block_size = 16) {
    config.validate();
    detail::KVStore<S>::check_head_dim(config.head_dim, "BlockPool keys");
    detail::KVStore<SV>::check_head_dim(config.head_dim, "BlockPool values");
    if (block_size <= 0 || block_size % kSubBlock != 0)
      throw ConfigError(detail::msg("BlockPool block_size = ", block_size, " must be a positive multiple of ", kSubBlock,
                                    " (the attention kernel reads 16-position sub-blocks)"));
    const int longest = (config.max_seq_len + kSubBlock - 1) / kSubBlock * kSubBlock;
    if (block_size > longest)
      throw ConfigError(detail::msg("BlockPool block_size = ", block_size, " exceeds max_seq_len = ", config.max_seq_len,
                                    " rounded up to a multiple of 16 (", longest, ")"));
    if (n_blocks < 1) throw ConfigError(detail::msg("BlockPool n_blocks = ", n_blocks, " must be at least 1"));
    shape_ = CacheShape::of(config);
    block_size_ = block_size;
    n_blocks_ = n_blocks;
    subs_per_block_ = block_size / kSubBlock;
    using detail::cache_size_mul;
    const std::size_t sub_elems = cache_size_mul(
        cache_size_mul(static_cast<std::size_t>(shape_.n_kv_heads), static_cast<std::size_t>(shape_.head_dim),
                       "BlockPool n_kv_heads x head_dim"),
        kSubBlock, "BlockPool sub-block elements");
    const std::size_t block_elems = cache_size_mul(
        cache_size_mul(static_cast<std::size_t>(shape_.n_layers), static_cast<std::size_t>(subs_per_block_) * 2,
                       "BlockPool sub-blocks per block"),
        sub_elems, "BlockPool block elements");
    cache_size_mul(static_cast<std::size_t>(n_blocks), block_elems, "BlockPool elements");
    cache_size_mul(sub_elems, 8, "BlockPool sub-block bytes");  // no storage type takes more than 8 bytes a value
    k_bytes_ = detail::KVStore<S>::bytes(sub_elems);
    v_bytes_ = detail::KVStore<SV>::bytes(sub_elems);
    block_bytes_ = cache_size_mul(
        cache_size_mul(static_cast<std::size_t>(shape_.n_layers), static_cast<std::size_t>(subs_per_block_),
                       "BlockPool sub-blocks per block"),
        k_bytes_ + v_bytes_, "BlockPool block bytes");
    const std::size_t bytes = cache_size_mul(static_cast<std::size_t>(n_blocks), block_bytes_, "BlockPool bytes");
    sub_elems_ = static_cast<long>(sub_elems);
    data_.resize(bytes);
    refcount_.assign(n_blocks, 0);
    free_.reserve(n_blocks);
    for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // hands out 0, 1, 2, ... first
  }

  BlockPool(const BlockPool&) = delete;  // sequences point at their pool: it stays where it is
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() { KVD_ASSERT(live_.empty() && "a BlockPool must outlive its PagedSequences"); }

  const CacheShape& shape() const { return shape_; }
  DType dtype() const { return DTypeOf<S>::value; }         ///< the keys' storage type
  DType value_dtype() const { return DTypeOf<SV>::value; }  ///< the values' storage type
  int block_size() const { return block_size_; }      ///< tokens per block
  int n_blocks() const { return n_blocks_; }          ///< blocks in the pool
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int blocks_in_use() const { return n_blocks_ - free_blocks(); }
  /// Sequences holding block b, in [0, n_blocks); 0 means b is free.
  int refcount(int b) const { return refcount_.at(b); }

  /// Bytes one token takes: n_layers * n_kv_heads * (bytes of head_dim keys + of head_dim values), as in KVCache.
  std::uint64_t bytes_per_token() const {
    return static_cast<std::uint64_t>(shape_.n_layers) * shape_.n_kv_heads *
           (dtype_bytes_for(DTypeOf<S>::value, shape_.head_dim) + dtype_bytes_for(DTypeOf<SV>::value, shape_.head_dim));
  }
  std::uint64_t bytes_per_block() const { return block_bytes_; }  ///< bytes_per_token * block_size
  std::uint64_t bytes_reserved() const { return bytes_per_block() * n_blocks_; }

  /// Blocks a sequence of `tokens` positions holds: ceil(tokens / block_size).
  int blocks_for(int tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  /// Memory use now (see PoolStats). O(n_blocks + total table entries); allocates a scratch vector.
  PoolStats stats() const {
    PoolStats s;
    s.block_size = block_size_;
    s.blocks_total = n_blocks_;
    s.blocks_in_use = blocks_in_use();
    s.sequences = static_cast<long>(live_.size());
    std::vector<int> fill(n_blocks_, 0);  // live slots of each block: the most any holder reads
    for (const PagedSequence<T, S, SV>* seq : live_) {
      s.tokens_stored += static_cast<std::uint64_t>(seq->length() - seq->first_position());
      const auto& table = seq->block_table();
      for (std::size_t i = 0; i < table.size(); ++i) {
        if (table[i] < 0) continue;  // released: behind a sliding window
        const int f = std::min(block_size_, seq->length() - static_cast<int>(i) * block_size_);
        fill[table[i]] = std::max(fill[table[i]], f);
      }
    }
    for (int b = 0; b < n_blocks_; ++b) {
      s.tokens_resident += static_cast<std::uint64_t>(fill[b]);
      s.blocks_shared += refcount_[b] > 1 ? 1 : 0;
    }
    s.bytes_reserved = bytes_reserved();
    s.bytes_in_use = bytes_per_block() * static_cast<std::uint64_t>(s.blocks_in_use);
    s.bytes_live = bytes_per_token() * s.tokens_resident;
    s.live_fraction = static_cast<double>(s.bytes_live) / static_cast<double>(s.bytes_reserved);
    s.live_fraction_in_use = s.bytes_in_use ? static_cast<double>(s.bytes_live) / static_cast<double>(s.bytes_in_use) : 0.0;
    return s;
  }

 private:
  friend class PagedSequence<T, S, SV>;

  // Takes a free block (reference count 1). Precondition: free_blocks() > 0.
  int allocate() {
    KVD_ASSERT(!free_.empty());
    const int b = free_.back();
    free_.pop_back();
    refcount_[b] = 1;
    return b;
  }
  void retain(int b) { ++refcount_[b]; }
  // Drops one reference; the block returns to the free list when none is left.
  void release(int b) {
    KVD_ASSERT(refcount_[b] > 0);
    if (--refcount_[b] == 0) free_.push_back(b);  // capacity n_blocks: never allocates
  }
  // Copies every layer's K and V of block `from` into block `to`.
  void copy_block(int from, int to) {
    std::memcpy(static_cast<void*>(block_data(to)), block_data(from), bytes_per_block());
  }
  std::uint8_t* block_data(int b) { return data_.data() + static_cast<std::size_t>(b) * block_bytes_; }
  // K sub-block `sub` of a layer in block b (bytes); the V sub-block follows it.
  const std::uint8_t* sub_block(int b, int layer, int sub) const {
    return data_.data() + static_cast<std::size_t>(b) * block_bytes_ +
           (static_cast<std::size_t>(layer) * subs_per_block_ + sub) * (k_bytes_ + v_bytes_);
  }

  // Sequences register themselves so stats() can count live tokens.
  void enroll(PagedSequence<T, S, SV>* seq) {
    seq->slot_ = static_cast<int>(live_.size());
    live_.push_back(seq);
  }
  void withdraw(PagedSequence<T, S, SV>* seq) {
    KVD_ASSERT(seq->slot_ >= 0 && live_[seq->slot_] == seq);
    live_[seq->slot_] = live_.back();
    live_[seq->slot_]->slot_ = seq->slot_;
    live_.pop_back();
    seq->slot_ = -1;
  }
  void replace(PagedSequence<T, S, SV>* from, PagedSequence<T, S, SV>* to) {
    live_[from->slot_] = to;
    to->slot_ = from->slot_;
    from->slot_ = -1;
  }

  CacheShape shape_;
  int block_size_ = 0, n_blocks_ = 0, subs_per_block_ = 0;
  long sub_elems_ = 0;             // values of one K (or V) sub-block: n_kv_heads * head_dim * 16
  std::size_t k_bytes_ = 0, v_bytes_ = 0;  // bytes of one K sub-block, one V sub-block
  std::size_t block_bytes_ = 0;    // bytes of one block: n_layers * subs_per_block * (k_bytes + v_bytes)
  detail::AlignedBuffer<std::uint8_t> data_;  // (n_blocks, n_layers, subs_per_block, [K | V]) bytes
  std::vector<int> refcount_;      // (n_blocks) sequences holding each block
  std::vector<int> free_;          // free block ids; the next allocation takes back()
  std::vector<PagedSequence<T, S, SV>*> live_;  // every live sequence of this pool
};

/// One sequence's KV cache as a block table into a BlockPool. Implements the
/// cache interface of KVCache (see kv_cache.hpp), so the Transformer takes it
/// wherever it takes a KVCache. Non-copyable (fork() shares, by name); movable.
template <class T, class S = T, class SV = S>
class PagedSequence {
 public:
  using Scalar = T;
  using Storage = S;        ///< keys
  using ValueStorage = SV;  ///< values
  using KRef = typename detail::KVStore<S>::KRef;   ///< what k_block() returns
  using VRef = typename detail::KVStore<SV>::VRef;  ///< what v_block() returns
  static constexpr int kBlock = detail::kLanes;  ///< positions per k_block / v_block

  /// An empty sequence in `pool`, which must outlive it. Holds no block yet.
  explicit PagedSequence(BlockPool<T, S, SV>& pool) : pool_(&pool) {
    reserve_tables();
    pool.enroll(this);
  }

  PagedSequence(const PagedSequence&) = delete;
  PagedSequence& operator=(const PagedSequence&) = delete;
  /// Takes over o's blocks; o is left empty and detached (it may only be destroyed or assigned to).
  PagedSequence(PagedSequence&& o) noexcept { take(o); }
  PagedSequence& operator=(PagedSequence&& o) noexcept {
    if (this != &o) {
      detach();
      take(o);
    }
    return *this;
  }
  /// Returns every block to the pool.
  ~PagedSequence() { detach(); }

  /// A new sequence with the same positions, sharing every block (reference
  /// count + 1 each): O(blocks), no K/V copied. The first append to either one
  /// into a shared, partly filled block copies that block (copy-on-write).
  PagedSequence fork() const {
    KVD_ASSERT(pool_ && pending_ == 0);
    PagedSequence f(*pool_);
    f.table_ = table_;
    f.sub_ = sub_;
    f.reserve_tables();
    for (int b : table_)
      if (b >= 0) pool_->retain(b);
    f.length_ = length_;
    f.released_ = released_;
    f.restored_first_ = restored_first_;
    return f;
  }

  BlockPool<T, S, SV>& pool() const { return *pool_; }
  const CacheShape& shape() const { return pool_->shape(); }
  int length() const { return length_; }                         ///< positions stored: [0, length)
  int capacity() const { return pool_->shape().max_seq_len; }   ///< positions it may reach if the pool has blocks
  /// Oldest position a future row can attend to: 0, or with a sliding window W
  /// length - W + 1. Blocks wholly before it have been returned to the pool.
  int first_position() const {
    const int w = pool_->shape().sliding_window;
    return w > 0 ? std::max(0, length_ - w + 1) : 0;
  }
  DType dtype() const { return DTypeOf<S>::value; }         ///< the keys' storage type
  DType value_dtype() const { return DTypeOf<SV>::value; }  ///< the values' storage type
  /// Pool block of each block_size-token block of the sequence: (ceil(length / block_size));
  /// -1 for a block released because it lies wholly behind the sliding window.
  const std::vector<int>& block_table() const { return table_; }

  /// Bytes one position takes: 2 (K, V) * n_layers * n_kv_heads * head_dim * sizeof(S).
  std::uint64_t bytes_per_token() const { return pool_->bytes_per_token(); }
  std::uint64_t bytes_used() const { return bytes_per_token() * static_cast<std::uint64_t>(length_); }  ///< live positions
  /// Bytes of the blocks this sequence holds (a shared block counts in full for each holder).
  std::uint64_t bytes_held() const { return pool_->bytes_per_block() * (table_.size() - released_); }

  /// Forgets every position and returns every block to the pool (a shared block
  /// stays with its other holders).
  void clear() { truncate(0); }

  /// Rewinds to `length` positions, dropping [length, this->length()) and
  /// returning the blocks past ceil(length / block_size) to the pool.
  /// Throws CacheFullError (nothing changed) if length is outside [0, this->length()],
  /// or, with a sliding window, if the rewound sequence's window reaches blocks
  /// already returned to the pool.
  void truncate(int length) {
    KVD_ASSERT(pending_ == 0);
    if (length < 0 || length > length_)
      throw CacheFullError(detail::msg("cannot truncate cache to ", length, " positions: it holds ", length_));
    const int w = pool_->shape().sliding_window;
    if (length > 0 && w > 0 && std::max(0, length - w + 1) / pool_->block_size() < released_)
      throw CacheFullError(detail::msg("cannot rewind this sliding-window sequence to ", length, " positions: position ",
                                       std::max(0, length - w + 1), " was released; the oldest kept is ",
                                       released_ * pool_->block_size()));
    if (length > 0 && detail::first_visible(length, w) < restored_first_)
      throw CacheFullError(detail::msg("cannot rewind this restored sliding-window sequence to ", length,
                                       " positions: position ", detail::first_visible(length, w),
                                       " was not restored; the oldest held is ", restored_first_));
    if (length == 0) restored_first_ = 0;
    const std::size_t keep = static_cast<std::size_t>(pool_->blocks_for(length));
    while (table_.size() > keep) pop_block();
    released_ = std::min(released_, static_cast<int>(table_.size()));
    length_ = length;
  }

  /// K[layer][pos][kv_head][d] as T. Precondition (asserted): pos < length().
  T key(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= 0 && pos < length_);
    return detail::from_storage<T>(k_block(layer, pos / kBlock)[(kv_head * shape().head_dim + d) * kBlock + pos % kBlock]);
  }
  /// V[layer][pos][kv_head][d] as T. Precondition (asserted): pos < length().
  T value(int layer, int pos, int kv_head, int d) const {
    KVD_ASSERT(pos >= 0 && pos < length_);
    return detail::from_storage<T>(v_block(layer, pos / kBlock)[(kv_head * kBlock + pos % kBlock) * shape().head_dim + d]);
  }

  // ---- The cache interface (see kv_cache.hpp) ----

  /// Throws CacheFullError (nothing changed) unless n more positions fit in
  /// max_seq_len. Whether the pool has the blocks is checked by prepare_append.
  void check_room(int n) const {
    if (n > capacity() - length_)
      throw CacheFullError(detail::msg("paged KV cache full: appending ", n, " position(s) to ", length_,
                                       " would exceed max_seq_len = ", capacity()));
  }

  /// Makes positions [length, length + n) writable: takes the blocks they need
  /// from the pool and, if the partly filled last block is shared, replaces it
  /// by a private copy (copy-on-write). check_room(n) must hold.
  /// Throws OutOfBlocksError, naming the blocks needed and free, if the pool
  /// cannot supply them; the sequence and the pool are then unchanged.
  void prepare_append(int n) {
    KVD_ASSERT(pending_ == 0 && n >= 0 && n <= capacity() - length_);
    if (n == 0) return;
    const int have = static_cast<int>(table_.size());
    const int want = pool_->blocks_for(length_ + n);
    const bool cow = length_ % pool_->block_size() != 0 && pool_->refcount_[table_.back()] > 1;
    const int needed = want - have + (cow ? 1 : 0);
    if (needed > pool_->free_blocks())
      throw OutOfBlocksError(detail::msg(
          "block pool out of blocks: appending ", n, " position(s) to a sequence of length ", length_, " needs ",
          needed, " block(s) of ", pool_->block_size(), " tokens", cow ? " (one a copy-on-write of a shared block)" : "",
          " but only ", pool_->free_blocks(), " of ", pool_->n_blocks(), " are free"));
    if (cow) {  // the other holders keep the original (if only one is left, it may then write in place)
      const int copy = pool_->allocate();
      pool_->copy_block(table_.back(), copy);
      cow_old_ = table_.back();
      pool_->release(cow_old_);  // shared, so never freed here
      set_last_block(copy);
    }
    for (int i = have; i < want; ++i) push_block(pool_->allocate());
    pending_ = n;
    added_ = want - have;
  }

  /// Undoes prepare_append(n) when a later cache of the same call could not
  /// make room: returns the blocks it took and restores a copied-on-write block.
  void cancel_append(int n) {
    KVD_ASSERT(n == pending_);
    (void)n;
    for (; added_ > 0; --added_) pop_block();
    if (cow_old_ >= 0) {
      pool_->release(table_.back());
      pool_->retain(cow_old_);
      set_last_block(cow_old_);
      cow_old_ = -1;
    }
    pending_ = 0;
  }

  /// Writes one position's K and V (each n_kv_heads * head_dim) for one layer.
  /// Precondition (asserted): pos in [length, length + n) of the pending prepare_append(n).
  void write(int layer, int pos, const T* k, const T* v) {
    KVD_ASSERT(pos >= length_ && pos < length_ + pending_);
    KVD_ASSERT(pool_->refcount_[table_[pos / pool_->block_size()]] == 1);  // never write a shared block
    std::uint8_t* kb = const_cast<std::uint8_t*>(sub_[pos / kBlock] + layer * layer_stride_);
    const int hk = pool_->shape().n_kv_heads, dh = pool_->shape().head_dim;
    detail::KVStore<S>::store_k(kb, sub_elems_, pos % kBlock, k, hk, dh);
    detail::KVStore<SV>::store_v(kb + pool_->k_bytes_, sub_elems_, pos % kBlock, v, hk, dh);
  }

  /// Makes the n written positions part of the sequence. With a sliding window,
  /// returns the blocks that lie wholly before the next row's window to the pool.
  void commit_append(int n) {
    KVD_ASSERT(n == pending_);
    length_ += n;
    cow_old_ = -1;
    pending_ = added_ = 0;
    const int behind = first_position() / pool_->block_size();  // blocks no future row reads
    for (; released_ < behind; ++released_) {
      pool_->release(table_[released_]);
      table_[released_] = -1;
      for (int s = 0; s < pool_->subs_per_block_; ++s) sub_[released_ * pool_->subs_per_block_ + s] = nullptr;
    }
  }

  /// After a restore appended positions [0, length) but wrote only [first, length)
  /// (a sliding-window file holds no older ones): marks the older ones as never held,
  /// so truncate() refuses a length whose window would read them.
  /// Precondition (asserted): 0 <= first <= length().
  void commit_restored(int first) {
    KVD_ASSERT(first >= 0 && first <= length_ && pending_ == 0);
    restored_first_ = first;
  }

  /// K sub-block b (positions [16b, 16b + 16)) of a layer: (n_kv_heads, head_dim, 16).
  /// One table look-up, no division: the attention kernel calls this per position.
  KRef k_block(int layer, int b) const {
    KVD_ASSERT(b >= 0 && b < static_cast<int>(sub_.size()));
    return detail::KVStore<S>::k_ref(sub_[b] + layer * layer_stride_, sub_elems_);
  }
  /// V sub-block b of a layer: (n_kv_heads, 16, head_dim).
  VRef v_block(int layer, int b) const {
    KVD_ASSERT(b >= 0 && b < static_cast<int>(sub_.size()));
    return detail::KVStore<SV>::v_ref(sub_[b] + layer * layer_stride_ + pool_->k_bytes_, sub_elems_);
  }

 private:
  friend class BlockPool<T, S, SV>;

  // Room for a whole sequence, so appends never reallocate the tables.
  void reserve_tables() {
    const int blocks = pool_->blocks_for(pool_->shape().max_seq_len);
    table_.reserve(blocks);
    sub_.reserve(static_cast<std::size_t>(blocks) * pool_->subs_per_block_);
    layer_stride_ = static_cast<long>(pool_->subs_per_block_) * static_cast<long>(pool_->k_bytes_ + pool_->v_bytes_);
    sub_elems_ = pool_->sub_elems_;
  }
  // Appends pool block b (already counted for this sequence) to the tables.
  void push_block(int b) {
    table_.push_back(b);
    for (int s = 0; s < pool_->subs_per_block_; ++s) sub_.push_back(pool_->sub_block(b, 0, s));
  }
  // Drops the last block from the tables and returns our reference to it (if not already released).
  void pop_block() {
    if (table_.back() >= 0) pool_->release(table_.back());
    table_.pop_back();
    sub_.resize(sub_.size() - pool_->subs_per_block_);
  }
  // Points the last table entry at pool block b (reference counts are the caller's business).
  void set_last_block(int b) {
    table_.back() = b;
    const int per = pool_->subs_per_block_;
    for (int s = 0; s < per; ++s) sub_[sub_.size() - per + s] = pool_->sub_block(b, 0, s);
  }
  // Moves o's state here (this holds nothing and is in no registry); o is left detached.
  void take(PagedSequence& o) {
    KVD_ASSERT(o.pending_ == 0);
    pool_ = o.pool_;
    table_ = std::move(o.table_);
    sub_ = std::move(o.sub_);
    length_ = o.length_;
    released_ = o.released_;
    restored_first_ = o.restored_first_;
    layer_stride_ = o.layer_stride_;
    sub_elems_ = o.sub_elems_;
    if (pool_) pool_->replace(&o, this);
    o.pool_ = nullptr;
    o.table_.clear();
    o.sub_.clear();
    o.length_ = 0;
    o.released_ = 0;
    o.restored_first_ = 0;
  }
  // Returns every block and leaves the pool's registry.
  void detach() {
    if (!pool_) return;
    KVD_ASSERT(pending_ == 0);
    while (!table_.empty()) pop_block();
    length_ = released_ = restored_first_ = 0;
    pool_->withdraw(this);
    pool_ = nullptr;
  }

  BlockPool<T, S, SV>* pool_ = nullptr;
  std::vector<int> table_;     // (ceil(length / block_size)) pool block of each block of the sequence
  std::vector<const std::uint8_t*> sub_;  // (table_.size() * block_size / 16) layer 0's K sub-block of each 16 positions
  long layer_stride_ = 0;      // bytes from one layer's sub-block to the next layer's
  long sub_elems_ = 0;         // values of one K (or V) sub-block; V follows K
  int length_ = 0;
  int released_ = 0;           // leading table entries released behind a sliding window (now -1)
  int restored_first_ = 0;     // oldest position a restore wrote (older ones in held blocks were never written)
  int slot_ = -1;              // index in pool_->live_
  // An append between prepare_append and commit_append / cancel_append:
  int pending_ = 0;            // positions prepared
  int added_ = 0;              // blocks appended to table_ for them
  int cow_old_ = -1;           // the shared block replaced by a private copy (our reference to it is dropped), or -1
};

}  // namespace kvd
