// SPDX-License-Identifier: Apache-2.0
// Embedding tables (f32 / f16 / row-wise int8), pooled lookups, .temb files and mmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/recsys/embedding.h"

namespace tandem::rec {

int64_t hash_id(int64_t id, uint64_t salt, int64_t rows) {
  return static_cast<int64_t>(splitmix64(static_cast<uint64_t>(id) ^ salt) %
                              static_cast<uint64_t>(rows));
}

int64_t EmbeddingTable::row_bytes(DType dtype, int64_t dim) {
  switch (dtype) {
    case DType::kF32:
      return 4 * dim;
    case DType::kF16:
      return 2 * dim;
    case DType::kI8:
      return dim + 8;
    default:
      throw Unsupported(cat("embedding tables hold f32, f16 or i8 rows, not ", dtype_name(dtype)));
  }
}

namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'E', 'M', 'B', '0', '1'};
constexpr int64_t kHeaderBytes = 64;

uint32_t dtype_code(DType d) { return d == DType::kF32 ? 0 : d == DType::kF16 ? 1 : 2; }

// Converts one f32 row into the stored layout.
void encode_row(const float* x, int64_t dim, DType dtype, uint8_t* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, x, 4 * dim);
  } else if (dtype == DType::kF16) {
    for (int64_t d = 0; d < dim; ++d) {
      const uint16_t h = f32_to_f16(x[d]);
      std::memcpy(dst + 2 * d, &h, 2);
    }
  } else {
    float mn = x[0], mx = x[0];
    for (int64_t d = 1; d < dim; ++d) mn = std::min(mn, x[d]), mx = std::max(mx, x[d]);
    const float scale = (mx - mn) / 255.0f;
    for (int64_t d = 0; d < dim; ++d) {
      const float q = scale > 0 ? std::nearbyint((x[d] - mn) / scale) : 0.0f;
      dst[d] = static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
    }
    std::memcpy(dst + dim, &scale, 4);
    std::memcpy(dst + dim + 4, &mn, 4);
  }
}

std::shared_ptr<void> allocate_owned(int64_t bytes) {
  Allocator& a = allocator(Device::cpu());
  void* p = a.allocate(static_cast<size_t>(bytes));
  return std::shared_ptr<void>(p, [&a, bytes](void* q) { a.deallocate(q, size_t(bytes)); });
}

void generate_rows(const GeneratedTensor& g, int64_t first, int64_t count, int64_t dim, DType dtype,
                   uint8_t* dst) {
  const int64_t rb = EmbeddingTable::row_bytes(dtype, dim);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(dim));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < count; ++r) {
      const uint64_t base = static_cast<uint64_t>((first + r) * dim);
      for (int64_t d = 0; d < dim; ++d) row[d] = g.at(base + d);
      encode_row(row.data(), dim, dtype, dst + r * rb);
    }
  }
}

// Row accumulation kernels: acc[d] += value(row)[d]. AVX2/F16C variants where the CPU has them
// (chosen once at run time), portable loops otherwise.
void acc_f32(const float* f, float* acc, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] += f[d];
}
void acc_f16(const uint16_t* h, float* acc, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] += f16_to_f32(h[d]);
}
void acc_i8(const uint8_t* q, float scale, float bias, float* acc, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] += q[d] * scale + bias;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) void acc_f16_avx2(const uint16_t* h, float* acc,
                                                           int64_t dim) {
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + d)));
    _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), v));
  }
  for (; d < dim; ++d) acc[d] += f16_to_f32(h[d]);
}
__attribute__((target("avx2,fma"))) void acc_i8_avx2(const uint8_t* q, float scale, float bias,
                                                     float* acc, int64_t dim) {
  const __m256 s = _mm256_set1_ps(scale), b = _mm256_set1_ps(bias);
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + d));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), _mm256_fmadd_ps(v, s, b)));
  }
  for (; d < dim; ++d) acc[d] += q[d] * scale + bias;
}
bool have_f16c() {  // CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports lacks "f16c")
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
bool have_avx2() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
  return ok;
}
#endif

void acc_row(const uint8_t* p, DType dtype, int64_t dim, float* acc) {
  if (dtype == DType::kF32) {
    acc_f32(reinterpret_cast<const float*>(p), acc, dim);
    return;
  }
  if (dtype == DType::kF16) {
#if defined(__x86_64__)
    if (have_avx2()) return acc_f16_avx2(reinterpret_cast<const uint16_t*>(p), acc, dim);
#endif
    return acc_f16(reinterpret_cast<const uint16_t*>(p), acc, dim);
  }
  float scale, bias;
  std::memcpy(&scale, p + dim, 4);
  std::memcpy(&bias, p + dim + 4, 4);
#if defined(__x86_64__)
  if (have_avx2()) return acc_i8_avx2(p, scale, bias, acc, dim);
#endif
  acc_i8(p, scale, bias, acc, dim);
}

// Rows ahead of the current one whose cache lines are prefetched (random gathers are latency
// bound; measured on the 2-vCPU VM: see docs/recsys.md).
constexpr int64_t kPrefetchDistance = 8;

}  // namespace

EmbeddingTable EmbeddingTable::generate(const std::string& name, int64_t rows, int64_t dim,
                                        DType dtype, uint64_t model_seed, float scale) {
  if (rows <= 0 || dim <= 0)
    throw InvalidArgument(
        cat("table '", name, "': rows ", rows, " and dim ", dim, " must be positive"));
  EmbeddingTable t;
  t.name_ = name;
  t.rows_ = rows;
  t.dim_ = dim;
  t.dtype_ = dtype;
  t.row_bytes_ = row_bytes(dtype, dim);
  t.storage_ = allocate_owned(rows * t.row_bytes_);
  t.base_ = static_cast<const uint8_t*>(t.storage_.get());
  generate_rows({tensor_seed(model_seed, name), scale, 0.0f}, 0, rows, dim, dtype,
                static_cast<uint8_t*>(t.storage_.get()));
  return t;
}

EmbeddingTable EmbeddingTable::from_f32(const std::string& name, const float* values, int64_t rows,
                                        int64_t dim, DType dtype) {
  EmbeddingTable t;
  t.name_ = name;
  t.rows_ = rows;
  t.dim_ = dim;
  t.dtype_ = dtype;
  t.row_bytes_ = row_bytes(dtype, dim);
  t.storage_ = allocate_owned(rows * t.row_bytes_);
  t.base_ = static_cast<const uint8_t*>(t.storage_.get());
  auto* dst = static_cast<uint8_t*>(t.storage_.get());
  for (int64_t r = 0; r < rows; ++r)
    encode_row(values + r * dim, dim, dtype, dst + r * t.row_bytes_);
  return t;
}

EmbeddingTable EmbeddingTable::from_rows(const std::string& name, const uint8_t* data, int64_t rows,
                                         int64_t dim, DType dtype) {
  EmbeddingTable t;
  t.name_ = name;
  t.rows_ = rows;
  t.dim_ = dim;
  t.dtype_ = dtype;
  t.row_bytes_ = row_bytes(dtype, dim);
  t.storage_ = allocate_owned(rows * t.row_bytes_);
  t.base_ = static_cast<const uint8_t*>(t.storage_.get());
  std::memcpy(t.storage_.get(), data, static_cast<size_t>(rows * t.row_bytes_));
  return t;
}

namespace {

void write_header(std::ofstream& f, DType dtype, int64_t rows, int64_t dim) {
  uint8_t h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, 8);
  const uint32_t version = 1, code = dtype_code(dtype);
  const uint64_t vals[4] = {uint64_t(rows), uint64_t(dim),
                            uint64_t(EmbeddingTable::row_bytes(dtype, dim)),
                            uint64_t(kHeaderBytes)};
  std::memcpy(h + 8, &version, 4);
  std::memcpy(h + 12, &code, 4);
  std::memcpy(h + 16, vals, sizeof vals);
  f.write(reinterpret_cast<const char*>(h), kHeaderBytes);
}

}  // namespace

void EmbeddingTable::write_file(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError(cat("cannot create '", path, "': ", std::strerror(errno)));
  write_header(f, dtype_, rows_, dim_);
  f.write(reinterpret_cast<const char*>(base_), static_cast<std::streamsize>(bytes()));
  f.close();
  if (!f) throw IoError(cat("error writing '", path, "'"));
}

void EmbeddingTable::write_generated_file(const std::string& path, const std::string& name,
                                          int64_t rows, int64_t dim, DType dtype,
                                          uint64_t model_seed, float scale) {
  if (rows <= 0 || dim <= 0)
    throw InvalidArgument(cat("table '", name, "': rows and dim must be positive"));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError(cat("cannot create '", path, "': ", std::strerror(errno)));
  write_header(f, dtype, rows, dim);
  const int64_t rb = row_bytes(dtype, dim);
  const int64_t chunk = std::max<int64_t>(1, (int64_t{8} << 20) / rb);
  std::vector<uint8_t> buf(static_cast<size_t>(chunk * rb));
  const GeneratedTensor g{tensor_seed(model_seed, name), scale, 0.0f};
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    generate_rows(g, r, n, dim, dtype, buf.data());
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(n * rb));
    if (!f) throw IoError(cat("error writing '", path, "' at row ", r));
  }
  f.close();
  if (!f) throw IoError(cat("error writing '", path, "'"));
}

int64_t EmbeddingTable::touch_rows(const int64_t* rows, int64_t n) const {
  if (!mapped_) return 0;
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Each page once: hot rows repeat within a query, and rows share pages.
  std::vector<uintptr_t> pages;
  pages.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= rows_) continue;
    const auto first = reinterpret_cast<uintptr_t>(row_data(r));
    const uintptr_t last = first + static_cast<uintptr_t>(row_bytes_) - 1;
    for (uintptr_t p = first & ~(page - 1); p <= last; p += page) pages.push_back(p);
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  const auto lo = reinterpret_cast<uintptr_t>(base_);
  unsigned sum = 0;
  for (uintptr_t p : pages) sum += *reinterpret_cast<const volatile uint8_t*>(std::max(p, lo));
  (void)sum;
  return static_cast<int64_t>(pages.size());
}

EmbeddingTable EmbeddingTable::map_file(const std::string& path, const std::string& name) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(cat("cannot open '", path, "': ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw IoError(cat("cannot stat '", path, "': ", std::strerror(e)));
  }
  const int64_t size = st.st_size;
  auto fail = [&](int64_t off, const std::string& what) {
    ::close(fd);
    return ParseError(path, off, what);
  };
  uint8_t h[kHeaderBytes];
  if (size < kHeaderBytes) throw fail(0, cat("file of ", size, " bytes has no 64-byte header"));
  if (::pread(fd, h, kHeaderBytes, 0) != kHeaderBytes) throw fail(0, "cannot read the header");
  if (std::memcmp(h, kMagic, 8) != 0) throw fail(0, "bad magic (expected TNDEMB01)");
  uint32_t version, code;
  uint64_t vals[4];
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&code, h + 12, 4);
  std::memcpy(vals, h + 16, sizeof vals);
  if (version != 1) throw fail(8, cat("unsupported version ", version));
  if (code > 2) throw fail(12, cat("unknown dtype code ", code));
  const DType dtype = code == 0 ? DType::kF32 : code == 1 ? DType::kF16 : DType::kI8;
  if (vals[0] == 0 || vals[0] > (uint64_t{1} << 40)) throw fail(16, cat("bad row count ", vals[0]));
  if (vals[1] == 0 || vals[1] > (uint64_t{1} << 20)) throw fail(24, cat("bad dim ", vals[1]));
  const int64_t rows = int64_t(vals[0]), dim = int64_t(vals[1]);
  if (int64_t(vals[2]) != row_bytes(dtype, dim))
    throw fail(32, cat("row bytes ", vals[2], " do not match ", dtype_name(dtype), " x ", dim));
  if (vals[3] != uint64_t(kHeaderBytes)) throw fail(40, cat("data offset ", vals[3], " is not 64"));
  const int64_t need = kHeaderBytes + rows * int64_t(vals[2]);
  if (size != need)
    throw fail(size < need ? size : need,
               cat("file has ", size, " bytes but ", rows, " rows need ", need));
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw IoError(cat("cannot map '", path, "': ", std::strerror(e)));
  EmbeddingTable t;
  t.name_ = name.empty() ? path : name;
  t.rows_ = rows;
  t.dim_ = dim;
  t.dtype_ = dtype;
  t.row_bytes_ = int64_t(vals[2]);
  t.mapped_ = true;
  t.storage_ =
      std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, static_cast<size_t>(size)); });
  t.base_ = static_cast<const uint8_t*>(p) + kHeaderBytes;
  return t;
}

void EmbeddingTable::read_row(int64_t row, float* out) const {
  if (row < 0 || row >= rows_)
    throw InvalidArgument(cat("table '", name_, "': row ", row, " outside [0, ", rows_, ")"));
  const uint8_t* p = row_data(row);
  if (dtype_ == DType::kF32) {
    std::memcpy(out, p, 4 * dim_);
  } else if (dtype_ == DType::kF16) {
    for (int64_t d = 0; d < dim_; ++d) {
      uint16_t h;
      std::memcpy(&h, p + 2 * d, 2);
      out[d] = f16_to_f32(h);
    }
  } else {
    float scale, bias;
    std::memcpy(&scale, p + dim_, 4);
    std::memcpy(&bias, p + dim_ + 4, 4);
    for (int64_t d = 0; d < dim_; ++d) out[d] = p[d] * scale + bias;
  }
}

void EmbeddingTable::accumulate_row(int64_t row, float* acc, HotRowCache* cache) const {
  if (row < 0 || row >= rows_)
    throw InvalidArgument(cat("table '", name_, "': id ", row, " outside [0, ", rows_, ")"));
  const uint8_t* p = row_data(row);
  if (cache) {
    float tmp[512];
    std::vector<float> big;
    float* buf = tmp;
    if (dim_ > 512) {
      big.resize(size_t(dim_));
      buf = big.data();
    }
    if (!cache->lookup(row, buf)) {
      read_row(row, buf);
      cache->insert(row, buf);
    }
    for (int64_t d = 0; d < dim_; ++d) acc[d] += buf[d];
    return;
  }
  acc_row(p, dtype_, dim_, acc);
}

void EmbeddingTable::pooled_lookup(const int64_t* ids, const int64_t* offsets, int64_t bags,
                                   Pooling mode, float* out, int64_t out_stride,
                                   HotRowCache* cache) const {
  if (cache && cache->dim() != dim_)
    throw InvalidArgument(
        cat("table '", name_, "': cache of width ", cache->dim(), " for dim ", dim_));
  for (int64_t b = 0; b < bags; ++b) {
    float* acc = out + b * out_stride;
    std::fill(acc, acc + dim_, 0.0f);
    const int64_t lo = offsets[b], hi = offsets[b + 1];
    if (hi < lo) throw InvalidArgument(cat("table '", name_, "': offsets decrease at bag ", b));
    for (int64_t i = lo; i < hi; ++i) {
      if (!cache && i + kPrefetchDistance < offsets[bags]) {
        const int64_t next = ids[i + kPrefetchDistance];
        if (next >= 0 && next < rows_) {
          const uint8_t* q = row_data(next);
          for (int64_t off = 0; off < row_bytes_; off += 64) __builtin_prefetch(q + off);
        }
      }
      accumulate_row(ids[i], acc, cache);
    }
    if (mode == Pooling::kMean && hi > lo) {
      const float inv = 1.0f / static_cast<float>(hi - lo);
      for (int64_t d = 0; d < dim_; ++d) acc[d] *= inv;
    }
  }
}

void EmbeddingTable::pooled_lookup_hashed(const int64_t* raw_ids, const int64_t* offsets,
                                          int64_t bags, uint64_t salt, Pooling mode, float* out,
                                          int64_t out_stride, HotRowCache* cache) const {
  std::vector<int64_t> rows(static_cast<size_t>(offsets[bags] - offsets[0]));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = hash_id(raw_ids[offsets[0] + i], salt, rows_);
  std::vector<int64_t> off(static_cast<size_t>(bags + 1));
  for (int64_t b = 0; b <= bags; ++b) off[b] = offsets[b] - offsets[0];
  pooled_lookup(rows.data(), off.data(), bags, mode, out, out_stride, cache);
}

// ---- HotRowCache ----

HotRowCache::HotRowCache(int64_t capacity_rows, int64_t dim, int ways) : ways_(ways), dim_(dim) {
  if (ways < 1 || ways > 64)
    throw InvalidArgument(cat("HotRowCache: ways ", ways, " not in [1, 64]"));
  if (capacity_rows < ways || dim <= 0)
    throw InvalidArgument(cat("HotRowCache: capacity ", capacity_rows, " rows (>= ways ", ways,
                              ") and dim ", dim, " (> 0) required"));
  sets_ = capacity_rows / ways;
  keys_.assign(static_cast<size_t>(sets_ * ways_), -1);
  stamps_.assign(keys_.size(), 0);
  values_.assign(keys_.size() * static_cast<size_t>(dim_), 0.0f);
  locks_ = std::make_unique<Set[]>(static_cast<size_t>(sets_));
}

bool HotRowCache::lookup(int64_t row, float* out) {
  const int64_t set = static_cast<int64_t>(splitmix64(uint64_t(row)) % uint64_t(sets_));
  std::lock_guard lk(locks_[set].mu);
  for (int64_t w = 0; w < ways_; ++w) {
    const int64_t slot = set * ways_ + w;
    if (keys_[slot] == row) {
      stamps_[slot] = ++clock_;
      std::memcpy(out, &values_[slot * dim_], sizeof(float) * dim_);
      hits_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void HotRowCache::insert(int64_t row, const float* values) {
  const int64_t set = static_cast<int64_t>(splitmix64(uint64_t(row)) % uint64_t(sets_));
  std::lock_guard lk(locks_[set].mu);
  int64_t victim = set * ways_;
  for (int64_t w = 0; w < ways_; ++w) {
    const int64_t slot = set * ways_ + w;
    if (keys_[slot] == row) {
      victim = slot;
      break;
    }
    if (keys_[slot] == -1 || stamps_[slot] < stamps_[victim]) victim = slot;
  }
  keys_[victim] = row;
  stamps_[victim] = ++clock_;
  std::memcpy(&values_[victim * dim_], values, sizeof(float) * dim_);
}

void HotRowCache::reset_stats() {
  hits_ = 0;
  misses_ = 0;
}

}  // namespace tandem::rec
