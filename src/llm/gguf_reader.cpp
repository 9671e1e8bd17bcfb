// SPDX-License-Identifier: Apache-2.0
// GgufFile: a bounds-checked, memory-mapped GGUF v2/v3 reader.
//
// The constructor walks the whole header once: every length and count is compared with the bytes
// that remain before anything is allocated (a count can never make a vector larger than the file),
// every metadata value is validated (types, bools, nesting depth), every tensor info is checked
// (dims, type, size products, alignment, extent inside the file, no overlap). Metadata values are
// not copied: the index keeps their file positions and the typed getters decode them on demand.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"

namespace tandem::llm {

namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

constexpr std::array<const char*, 13> kValueTypeNames = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

// Size of a fixed-size value type; 0 for string and array.
uint64_t fixed_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

// The fewest bytes one element of type t can take (bounds a count before anything is allocated).
uint64_t min_size(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return fixed_size(t);
}

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

// A read position inside the mapping; every read checks the remaining bytes first.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& path, uint64_t pos = 0)
      : data_(data), size_(size), path_(path), pos_(pos) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw ParseError(path_, static_cast<int64_t>(at), what);
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(pos_, cat(what, ": needs ", n, " bytes but the file has ", remaining(), " left"));
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

  std::string_view read_string(std::string_view what) {
    const uint64_t at = pos_;
    const auto len = read<uint64_t>(what);
    if (len > remaining())
      fail(at,
           cat(what, ": string length ", len, " exceeds the file (", remaining(), " bytes left)"));
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  const std::string& path_;
  uint64_t pos_;
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

// A metadata value: where it lies in the file. For arrays `pos` is the first element.
struct Value {
  GgufType type = GgufType::kU8;
  uint64_t pos = 0;
  GgufType elem = GgufType::kU8;
  uint64_t count = 0;
};

struct GgufFile::Impl {
  std::string path;
  const uint8_t* map = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> kvs;  // file order
  std::unordered_map<std::string, size_t> kv_index;
  std::vector<GgufTensorInfo> tensors;
  std::vector<uint64_t> tensor_info_pos;
  std::unordered_map<std::string, size_t> tensor_index;

  ~Impl() {
    if (map != nullptr) munmap(const_cast<uint8_t*>(map), size);
  }

  void map_file();
  void parse();
  Value parse_value(Cursor& c, GgufType type, const std::string& what, int depth);
  void check_tensor_data();

  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw ParseError(path, static_cast<int64_t>(at), what);
  }
  const Value& value(const std::string& key) const;
  std::string describe(const std::string& key, const Value& v) const;
  [[noreturn]] void type_mismatch(const std::string& key, const Value& v,
                                  const char* expected) const;
  int64_t decode_int(const std::string& key, const Value& v) const;
  double decode_float(const std::string& key, const Value& v) const;
  std::string_view decode_string(const Value& v) const;
  std::vector<Value> elements(const Value& array) const;
  // The element of type `elem` stored at `pos` (a nested array's header is read there).
  Value element_at(GgufType elem, uint64_t pos) const;
  uint64_t value_end(const Value& v) const;
  nlohmann::json to_json(const Value& v, size_t max_array) const;
};

void GgufFile::Impl::map_file() {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw NotFound(cat(path, ": no such file"));
    throw IoError(cat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(cat(path, ": not a regular file"));
  }
  size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail(0, "empty file (a GGUF header needs 24 bytes)");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    throw IoError(cat(path, ": mmap of ", size, " bytes failed: ", std::strerror(err)));
  map = static_cast<const uint8_t*>(p);
}

Value GgufFile::Impl::parse_value(Cursor& c, GgufType type, const std::string& what, int depth) {
  Value v;
  v.type = type;
  if (type == GgufType::kString) {
    v.pos = c.pos();
    c.read_string(what);
    return v;
  }
  if (type == GgufType::kArray) {
    if (depth >= kMaxArrayDepth)
      fail(c.pos(), cat(what, ": arrays nested deeper than ", kMaxArrayDepth));
    const uint64_t type_pos = c.pos();
    const auto elem = c.read<uint32_t>(cat(what, ": array element type"));
    if (elem > static_cast<uint32_t>(GgufType::kF64))
      fail(type_pos, cat(what, ": unknown array element type ", elem));
    v.elem = static_cast<GgufType>(elem);
    const uint64_t count_pos = c.pos();
    v.count = c.read<uint64_t>(cat(what, ": array count"));
    const uint64_t min = min_size(v.elem);
    if (v.count > c.remaining() / min)
      fail(count_pos, cat(what, ": array of ", v.count, " ", kValueTypeNames[elem],
                          " elements exceeds the file (", c.remaining(), " bytes left)"));
    v.pos = c.pos();
    if (const uint64_t fs = fixed_size(v.elem); fs != 0) {
      c.skip(v.count * fs, what);
      if (v.elem == GgufType::kBool) {
        for (uint64_t i = 0; i < v.count; ++i)
          if (map[v.pos + i] > 1)
            fail(v.pos + i,
                 cat(what, ": bool element ", i, " is ", int{map[v.pos + i]}, " (must be 0 or 1)"));
      }
    } else {
      for (uint64_t i = 0; i < v.count; ++i) {
        if (v.elem == GgufType::kString) {
          c.read_string(what);
        } else {
          parse_value(c, GgufType::kArray, cat(what, "[", i, "]"), depth + 1);
        }
      }
    }
    return v;
  }
  v.pos = c.pos();
  c.skip(fixed_size(type), what);
  if (type == GgufType::kBool && map[v.pos] > 1)
    fail(v.pos, cat(what, ": bool value is ", int{map[v.pos]}, " (must be 0 or 1)"));
  return v;
}

void GgufFile::Impl::parse() {
  Cursor c(map, size, path);
  if (size < 4 || std::memcmp(map, "GGUF", 4) != 0) {
    std::string found;
    for (uint64_t i = 0; i < std::min<uint64_t>(size, 4); ++i)
      found += cat("0123456789abcdef"[map[i] >> 4], "0123456789abcdef"[map[i] & 15]);
    fail(0, cat("bad magic: expected \"GGUF\" (47475546), found ", found, " (not a GGUF file)"));
  }
  c.skip(4, "magic");
  version = c.read<uint32_t>("version");
  if (version == 0x02000000u || version == 0x03000000u)
    fail(4, "big-endian GGUF files are not supported");
  if (version == 1) fail(4, "GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3)
    fail(4, cat("unsupported GGUF version ", version, " (only versions 2 and 3)"));
  const auto tensor_count = c.read<uint64_t>("tensor count");
  const auto kv_count = c.read<uint64_t>("metadata count");
  if (kv_count > c.remaining() / 13)
    fail(16,
         cat("metadata count ", kv_count, " exceeds the file (", c.remaining(), " bytes left)"));
  kvs.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t key_pos = c.pos();
    const std::string key(c.read_string(cat("metadata key ", i)));
    if (key.empty()) fail(key_pos, cat("metadata key ", i, " is empty"));
    const std::string what = cat("metadata '", key, "'");
    if (kv_index.count(key) != 0) fail(key_pos, cat(what, ": duplicate key"));
    const uint64_t type_pos = c.pos();
    const auto type = c.read<uint32_t>(cat(what, ": value type"));
    if (type > static_cast<uint32_t>(GgufType::kF64))
      fail(type_pos, cat(what, ": unknown value type ", type));
    Value v = parse_value(c, static_cast<GgufType>(type), what, 0);
    kv_index.emplace(key, kvs.size());
    kvs.emplace_back(key, v);
  }
  if (auto it = kv_index.find("general.alignment"); it != kv_index.end()) {
    const Value& v = kvs[it->second].second;
    if (!is_integer(v.type))
      fail(v.pos, cat("general.alignment is a ", kValueTypeNames[static_cast<int>(v.type)],
                      " (expected u32)"));
    const int64_t a = decode_int("general.alignment", v);
    if (a <= 0 || a > (int64_t{1} << 30) || (a & (a - 1)) != 0)
      fail(v.pos, cat("general.alignment ", a, " is not a power of two in [1, 2^30]"));
    alignment = static_cast<uint32_t>(a);
  }

  if (tensor_count > c.remaining() / 24)
    fail(8,
         cat("tensor count ", tensor_count, " exceeds the file (", c.remaining(), " bytes left)"));
  tensors.reserve(tensor_count);
  tensor_info_pos.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const uint64_t info_pos = c.pos();
    GgufTensorInfo t;
    t.name = std::string(c.read_string(cat("tensor info ", i, ": name")));
    if (t.name.empty()) fail(info_pos, cat("tensor info ", i, ": empty name"));
    const std::string what = cat("tensor '", t.name, "'");
    if (tensor_index.count(t.name) != 0) fail(info_pos, cat(what, ": duplicate tensor name"));
    const uint64_t ndims_pos = c.pos();
    const auto n_dims = c.read<uint32_t>(cat(what, ": n_dims"));
    if (n_dims > kMaxDims)
      fail(ndims_pos, cat(what, ": n_dims ", n_dims, " (at most ", kMaxDims, ")"));
    std::array<int64_t, kMaxDims> ne{};
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_pos = c.pos();
      const auto dim = c.read<uint64_t>(cat(what, ": dimension ", d));
      if (dim == 0) fail(dim_pos, cat(what, ": dimension ", d, " is 0"));
      if (dim > static_cast<uint64_t>(INT64_MAX))
        fail(dim_pos,
             cat(what, ": dimension ", d, " is negative (", static_cast<int64_t>(dim), ")"));
      ne[d] = static_cast<int64_t>(dim);
      if (__builtin_mul_overflow(numel, ne[d], &numel))
        fail(dim_pos, cat(what, ": element count overflows 64 bits"));
    }
    const uint64_t type_pos = c.pos();
    t.ggml_type = c.read<uint32_t>(cat(what, ": type"));
    int64_t block_elems = 0, block_bytes = 0;
    if (!ggml_type_layout(t.ggml_type, &block_elems, &block_bytes))
      fail(type_pos, cat(what, ": unknown ggml type ", t.ggml_type));
    const int64_t inner = n_dims == 0 ? 1 : ne[0];
    if (inner % block_elems != 0)
      fail(type_pos, cat(what, ": first dimension ", inner, " is not a multiple of ",
                         ggml_type_name(t.ggml_type), "'s block of ", block_elems));
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / block_elems, block_bytes, &nbytes))
      fail(type_pos, cat(what, ": byte size overflows 64 bits"));
    t.nbytes = static_cast<uint64_t>(nbytes);
    std::vector<int64_t> dims;
    for (int d = static_cast<int>(n_dims) - 1; d >= 0; --d) dims.push_back(ne[d]);
    t.shape = Shape(dims);
    const uint64_t off_pos = c.pos();
    t.offset = c.read<uint64_t>(cat(what, ": offset"));
    if (t.offset % alignment != 0)
      fail(off_pos, cat(what, ": data offset ", t.offset, " is not a multiple of the alignment ",
                        alignment));
    tensor_index.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
    tensor_info_pos.push_back(info_pos);
  }
  data_offset = align_up(c.pos(), alignment);
  check_tensor_data();
}

void GgufFile::Impl::check_tensor_data() {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 0; k < order.size(); ++k) {
    const GgufTensorInfo& t = tensors[order[k]];
    const uint64_t at = tensor_info_pos[order[k]];
    const uint64_t avail = size > data_offset ? size - data_offset : 0;
    if (t.offset > avail || t.nbytes > avail - t.offset)
      fail(at, cat("tensor '", t.name, "': data [", t.offset, ", +", t.nbytes,
                   ") ends past the end of the file (data section starts at byte ", data_offset,
                   ", file has ", size, " bytes)"));
    if (k + 1 < order.size()) {
      const GgufTensorInfo& next = tensors[order[k + 1]];
      if (t.offset + t.nbytes > next.offset)
        fail(tensor_info_pos[order[k + 1]],
             cat("tensor '", next.name, "': data at offset ", next.offset, " overlaps tensor '",
                 t.name, "' [", t.offset, ", ", t.offset + t.nbytes, ")"));
    }
  }
}

const Value& GgufFile::Impl::value(const std::string& key) const {
  auto it = kv_index.find(key);
  if (it == kv_index.end()) throw NotFound(cat(path, ": no metadata key '", key, "'"));
  return kvs[it->second].second;
}

std::string GgufFile::Impl::describe(const std::string& key, const Value& v) const {
  if (v.type == GgufType::kArray)
    return cat("array of ", kValueTypeNames[static_cast<int>(v.elem)]);
  return kValueTypeNames[static_cast<int>(v.type)];
}

void GgufFile::Impl::type_mismatch(const std::string& key, const Value& v,
                                   const char* expected) const {
  fail(v.pos, cat("metadata '", key, "' is a ", describe(key, v), ", expected ", expected));
}

namespace {
template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

int64_t GgufFile::Impl::decode_int(const std::string& key, const Value& v) const {
  const uint8_t* p = map + v.pos;
  switch (v.type) {
    case GgufType::kU8:
      return load<uint8_t>(p);
    case GgufType::kI8:
      return load<int8_t>(p);
    case GgufType::kU16:
      return load<uint16_t>(p);
    case GgufType::kI16:
      return load<int16_t>(p);
    case GgufType::kU32:
      return load<uint32_t>(p);
    case GgufType::kI32:
      return load<int32_t>(p);
    case GgufType::kI64:
      return load<int64_t>(p);
    case GgufType::kU64: {
      const auto u = load<uint64_t>(p);
      if (u > static_cast<uint64_t>(INT64_MAX))
        fail(v.pos, cat("metadata '", key, "': u64 value ", u, " exceeds the int64 range"));
      return static_cast<int64_t>(u);
    }
    default:
      type_mismatch(key, v, "an integer");
  }
}

double GgufFile::Impl::decode_float(const std::string& key, const Value& v) const {
  if (v.type == GgufType::kF32) return load<float>(map + v.pos);
  if (v.type == GgufType::kF64) return load<double>(map + v.pos);
  if (v.type == GgufType::kU64) return static_cast<double>(load<uint64_t>(map + v.pos));
  if (is_integer(v.type)) return static_cast<double>(decode_int(key, v));
  type_mismatch(key, v, "a number");
}

std::string_view GgufFile::Impl::decode_string(const Value& v) const {
  const auto len = load<uint64_t>(map + v.pos);
  return {reinterpret_cast<const char*>(map + v.pos + 8), len};
}

// Element i of an array (validated at open, so positions stay inside the mapping).
std::vector<Value> GgufFile::Impl::elements(const Value& array) const {
  std::vector<Value> out;
  out.reserve(array.count);
  uint64_t p = array.pos;
  for (uint64_t i = 0; i < array.count; ++i) {
    const Value e = element_at(array.elem, p);
    p = value_end(e);
    out.push_back(e);
  }
  return out;
}

Value GgufFile::Impl::element_at(GgufType elem, uint64_t pos) const {
  Value e;
  e.type = elem;
  e.pos = pos;
  if (elem == GgufType::kArray) {
    e.elem = load<GgufType>(map + pos);
    e.count = load<uint64_t>(map + pos + 4);
    e.pos = pos + 12;
  }
  return e;
}

uint64_t GgufFile::Impl::value_end(const Value& v) const {
  if (v.type == GgufType::kString) return v.pos + 8 + load<uint64_t>(map + v.pos);
  if (v.type != GgufType::kArray) return v.pos + fixed_size(v.type);
  if (const uint64_t fs = fixed_size(v.elem); fs != 0) return v.pos + v.count * fs;
  uint64_t p = v.pos;
  for (uint64_t i = 0; i < v.count; ++i) p = value_end(element_at(v.elem, p));
  return p;
}

nlohmann::json GgufFile::Impl::to_json(const Value& v, size_t max_array) const {
  switch (v.type) {
    case GgufType::kString:
      return std::string(decode_string(v));
    case GgufType::kBool:
      return map[v.pos] != 0;
    case GgufType::kF32:
      return load<float>(map + v.pos);
    case GgufType::kF64:
      return load<double>(map + v.pos);
    case GgufType::kU64:
      return load<uint64_t>(map + v.pos);
    case GgufType::kArray: {
      nlohmann::json items = nlohmann::json::array();
      const bool summarise = v.count > max_array;
      Value head = v;
      head.count = std::min<uint64_t>(v.count, max_array);
      for (const Value& e : elements(head)) items.push_back(to_json(e, max_array));
      if (!summarise) return items;
      return {{"array", kValueTypeNames[static_cast<int>(v.elem)]},
              {"count", v.count},
              {"first", std::move(items)}};
    }
    default:
      return decode_int("", v);
  }
}

GgufFile::GgufFile(const std::string& path) : impl_(std::make_shared<Impl>()) {
  impl_->path = path;
  impl_->map_file();
  impl_->parse();
}

GgufFile::~GgufFile() = default;

uint32_t GgufFile::version() const { return impl_->version; }
const std::string& GgufFile::path() const { return impl_->path; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
uint32_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::file_size() const { return impl_->size; }

bool GgufFile::has(const std::string& key) const { return impl_->kv_index.count(key) != 0; }

GgufType GgufFile::type_of(const std::string& key) const { return impl_->value(key).type; }

std::string GgufFile::get_string(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufType::kString) impl_->type_mismatch(key, v, "a string");
  return std::string(impl_->decode_string(v));
}

int64_t GgufFile::get_int(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (!is_integer(v.type)) impl_->type_mismatch(key, v, "an integer");
  return impl_->decode_int(key, v);
}

double GgufFile::get_float(const std::string& key) const {
  const Value& v = impl_->value(key);
  return impl_->decode_float(key, v);
}

bool GgufFile::get_bool(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufType::kBool) impl_->type_mismatch(key, v, "a bool");
  return impl_->map[v.pos] != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufType::kArray || v.elem != GgufType::kString)
    impl_->type_mismatch(key, v, "an array of string");
  std::vector<std::string> out;
  out.reserve(v.count);
  for (const Value& e : impl_->elements(v)) out.emplace_back(impl_->decode_string(e));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufType::kArray || !is_integer(v.elem))
    impl_->type_mismatch(key, v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v.count);
  for (const Value& e : impl_->elements(v)) out.push_back(impl_->decode_int(key, e));
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufType::kArray ||
      !(is_integer(v.elem) || v.elem == GgufType::kF32 || v.elem == GgufType::kF64))
    impl_->type_mismatch(key, v, "an array of numbers");
  std::vector<double> out;
  out.reserve(v.count);
  for (const Value& e : impl_->elements(v)) out.push_back(impl_->decode_float(key, e));
  return out;
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_int(key);
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(impl_->kvs.size());
  for (const auto& kv : impl_->kvs) out.push_back(kv.first);
  return out;
}

nlohmann::json GgufFile::metadata_json(size_t max_array) const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, v] : impl_->kvs) j[key] = impl_->to_json(v, max_array);
  return j;
}

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (info == nullptr) throw NotFound(cat(impl_->path, ": no tensor '", name, "'"));
  DType dtype;
  try {
    dtype = dtype_from_ggml_type(info->ggml_type);
  } catch (const Unsupported& e) {
    throw Unsupported(cat(impl_->path, ": tensor '", name, "' has ggml type ",
                          ggml_type_name(info->ggml_type),
                          ", which tandem cannot compute with (supported: F32, F16, BF16, Q8_0, "
                          "Q4_0, Q4_1, I8, I32)"));
  }
  const uint8_t* data = impl_->map + impl_->data_offset + info->offset;
  // Natural alignment of the storage unit (block types start with an f16 scale).
  const size_t natural = dtype == DType::kF32 || dtype == DType::kI32 ? 4
                         : dtype == DType::kI8                        ? 1
                                                                      : 2;
  if (reinterpret_cast<uintptr_t>(data) % natural != 0) {
    Tensor copy = Tensor::empty(info->shape, dtype);
    std::memcpy(copy.raw_data(), data, info->nbytes);
    return copy;
  }
  return Tensor::from_blob(const_cast<uint8_t*>(data), info->shape, dtype, Device::cpu(), impl_);
}

}  // namespace tandem::llm
