// Paged attention on the CPU, reading keys and values where they lie in the pool.
//
// The torch path (engine/kv_cache.py) first copies each sequence's pages out of the pool into one
// buffer per layer, then runs SDPA over it with a mask: every step copies every context it reads.
// This kernel follows the block table instead, one query row at a time: for position p of the
// row's sequence the key sits in slot block_table[p / block_size] * block_size + p % block_size.
// vLLM's CPU backend does the same in its own C++ kernels.
//
// One row is one query token: a decode's only token, or one token of a prompt (its context is every
// position up to its own, which is what causal attention means). Work is split over (row, KV head)
// pairs; the query heads that share a KV head (grouped-query attention) read each key once.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

// q: [T, heads, head_dim]; k_pool, v_pool: [slots, kv_heads, head_dim]; tables: [S, pages] block table
// of each sequence; seq_of_row: [T] the sequence each row belongs to; lengths: [T] the row's context
// length (its position + 1); window: a sliding window's width, 0 for none. Returns [T, heads, head_dim].
torch::Tensor paged_attention(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool, torch::Tensor tables,
                              torch::Tensor seq_of_row, torch::Tensor lengths, double scale, int64_t block_size,
                              int64_t window) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k_pool.scalar_type() == torch::kFloat32 &&
              v_pool.scalar_type() == torch::kFloat32, "the kernel reads float32 only");
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous() && tables.is_contiguous(),
              "the kernel reads contiguous tensors only");
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k_pool.size(1), width = tables.size(1), share = heads / kv_heads;
  auto out = torch::zeros_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  const int64_t* table = tables.data_ptr<int64_t>();
  const int64_t* seq = seq_of_row.data_ptr<int64_t>();
  const int64_t* length = lengths.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float s = static_cast<float>(scale);

  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> weights;  // the row's attention weights, one run of positions per shared head
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / kv_heads, g = item % kv_heads;
      const int64_t last = length[r], first = window > 0 ? std::max<int64_t>(0, last - window) : 0;
      const int64_t n = last - first;
      const int64_t* pages = table + seq[r] * width;
      weights.assign(share * n, 0.f);
      // Scores: each key, found through the block table, against each query head of this KV head.
      for (int64_t p = first; p < last; ++p) {
        const float* k = kp + ((pages[p / block_size] * block_size + p % block_size) * kv_heads + g) * dim;
        for (int64_t j = 0; j < share; ++j) {
          const float* qv = qp + (r * heads + g * share + j) * dim;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < dim; ++d) dot += qv[d] * k[d];
          weights[j * n + p - first] = dot * s;
        }
      }
      // Softmax per head, from the largest score so exp never overflows.
      for (int64_t j = 0; j < share; ++j) {
        float* w = weights.data() + j * n;
        const float top = *std::max_element(w, w + n);
        float sum = 0.f;
        for (int64_t t = 0; t < n; ++t) sum += (w[t] = std::exp(w[t] - top));
        for (int64_t t = 0; t < n; ++t) w[t] /= sum;
      }
      // The weighted sum of the values, read through the block table the same way.
      for (int64_t p = first; p < last; ++p) {
        const float* v = vp + ((pages[p / block_size] * block_size + p % block_size) * kv_heads + g) * dim;
        for (int64_t j = 0; j < share; ++j) {
          float* o = op + (r * heads + g * share + j) * dim;
          const float w = weights[j * n + p - first];
#pragma omp simd
          for (int64_t d = 0; d < dim; ++d) o[d] += w * v[d];
        }
      }
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_attention", &paged_attention, "attention over each row's context, read through its block table");
}
