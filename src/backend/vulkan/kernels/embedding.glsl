// embedding.glsl - row lookup: y[p, d] = table[ids[p], d], one invocation
// per output element; an id outside [0, EM_V) gives 0 (the table is never
// read out of bounds).
// Inputs: X0 = table [V,D], X1 = ids (i32). Defines: EM_V, EM_D.
// Does not: use shared memory.

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    IDX p = i / EM_D, d = i % EM_D;
    int id = X1I(p);
    Y(i) = (id >= 0 && id < EM_V) ? X0(IDX(id) * EM_D + d) : 0.0;
}
