export default function Home() {
  return (
    <main>
      <h1>model-gateway on Next.js</h1>
      <p>
        The OpenAI-compatible API is at <code>/api/v1</code>, e.g. <code>GET /api/v1/models</code>; the console at <code>/api/admin</code>.
      </p>
    </main>
  );
}
